"""Check the built book page by page: ``make docs-check``.

Two passes over ``site/`` (from ``make docs``):

1. links, without a browser: every ``href`` and ``src`` inside the site must name a file that exists
   (a folder means its ``index.html``), and every ``#fragment`` an ``id`` on the page it points to;
2. every page in headless Chromium (Debian's ``chromium``, driven by Playwright): it must load with
   status 200, show its article, raise no JavaScript error, request nothing from outside the site
   (the book opens offline), show every image (notebook figures are decoded, not just present), and
   hold no notebook cell that raised (mkdocs-jupyter renders an error as a ``jp-OutputArea-output``
   of type ``application/vnd.jupyter.stderr`` holding the traceback), and wrap no line of a ``<pre>`` (a
   printed table split mid-word; docs/book.css makes them scroll sideways). A screenshot of each page is
   kept in ``site-check/``. Opened from the file system, the home page's search box must name the command
   that serves the book (search cannot run from files).

    python docs/check_site.py [--site site] [--shots site-check] [--no-browser]

Exit status: 0 every page passed, 1 problems (each printed on a line), 2 the check could not run.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import shutil
import sys
import threading
import time
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
ERROR_OUTPUT = 'div.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"]'
TRACEBACK = "Traceback (most recent call last)"
LINKING = {"a": "href", "link": "href", "img": "src", "script": "src", "source": "src", "iframe": "src"}


@dataclass(frozen=True)
class Problem:
    page: str  # the page's path inside the site
    what: str

    def __str__(self) -> str:
        return f"{self.page}: {self.what}"


class _Page(HTMLParser):
    """The ids a page defines and the (tag, url) pairs it links to or loads."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.urls: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        found = dict(attrs)
        for key in ("id", "name") if tag == "a" else ("id",):
            if found.get(key):
                self.ids.add(str(found[key]))
        attr = LINKING.get(tag)
        if attr and attr in found and found[attr] is not None:
            self.urls.append((tag, str(found[attr])))


def pages_of(site: Path) -> list[Path]:
    """Every HTML page of the site (404.html aside: it is written for the server's root)."""
    return sorted(p for p in site.rglob("*.html") if p.name != "404.html")


def resolve(site: Path, page: Path, url: str) -> tuple[Path, str] | None:
    """The file (and fragment) a relative ``url`` on ``page`` names, or None for an outside or data URL."""
    parts = urlsplit(url)
    if parts.scheme or parts.netloc or url.startswith("/"):
        return None
    if not parts.path:
        return page, parts.fragment
    target = (page.parent / unquote(parts.path)).resolve()
    if target.is_dir() or parts.path.endswith("/"):
        target = target / "index.html"
    return target, parts.fragment


def check_links(site: Path) -> tuple[list[Problem], int]:
    """Broken links, images and anchors inside ``site``; returns the problems and the links checked."""
    site = site.resolve()
    parsed = {}
    for page in pages_of(site):
        parser = _Page()
        parser.feed(page.read_text(errors="replace"))
        parsed[page] = parser
    problems, checked = [], 0
    for page, parser in parsed.items():
        name = page.relative_to(site).as_posix()
        for tag, url in parser.urls:
            if tag == "script" and url == "":
                problems.append(Problem(name, "a <script> with an empty src (it would load the page as a script)"))
                continue
            found = resolve(site, page, url)
            if found is None:
                continue
            checked += 1
            target, fragment = found
            kind = "image" if tag == "img" else "link"
            if not target.is_file() or site not in target.parents:
                problems.append(Problem(name, f"broken {kind}: {url}"))
            elif fragment and target.suffix == ".html":
                ids = parsed[target].ids if target in parsed else _Page().ids
                if fragment not in ids:
                    problems.append(Problem(name, f"broken anchor: {url} (no id {fragment!r} there)"))
    return problems, checked


def browser_missing() -> str | None:
    """Why the browser pass cannot run here, or None when it can."""
    if not Path(CHROMIUM).is_file():
        return f"{CHROMIUM} not found (apt-get install chromium)"
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        return "Playwright for Python is not installed (pip install playwright; its browser download is not needed)"
    return None


def _serve(site: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve ``site`` on a free local port in a thread; returns the server and its base URL."""

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(site)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


# A <pre> (printed output, a table of results, code) whose text takes more rendered lines than it has: one of
# its lines wrapped. The rendered lines are the text's boxes (a Range's client rects) grouped by their tops: the
# highlighted tokens of one line sit a pixel or two apart.
_PAGE_STATE = """() => ({
  text: (document.querySelector('article') || document.body).innerText.trim().length,
  broken: Array.from(document.images).filter(i => !i.complete || i.naturalWidth === 0)
               .map(i => i.getAttribute('src').slice(0, 80)),
  wrapped: Array.from(document.querySelectorAll('pre')).filter(p => p.offsetParent !== null).map(p => {
    const text = p.querySelector('code') || p;  // not mkdocs-material's copy button, which sits in the <pre>
    const range = document.createRange();
    range.selectNodeContents(text);
    const rects = Array.from(range.getClientRects()).filter(r => r.width > 0 && r.height > 0);
    const tops = rects.map(r => r.top).sort((a, b) => a - b);
    const height = Math.min(...rects.map(r => r.height));
    let rendered = tops.length ? 1 : 0;  // boxes more than half a line below the last line's start a new line
    for (let i = 1, start = tops[0]; i < tops.length; i++) {
      if (tops[i] - start > height / 2) { rendered++; start = tops[i]; }
    }
    const lines = text.textContent.replace(/\\n+$/, '').split('\\n');
    if (rendered <= lines.length) return null;
    const longest = lines.reduce((a, b) => (b.length > a.length ? b : a), '');
    return longest.trim().slice(0, 60);
  }).filter(x => x !== null),
})"""


def check_page(page, base: str, name: str, shot: Path) -> list[Problem]:  # noqa: ANN001 (a Playwright Page)
    """Open one page of the served site and report what is wrong with it; saves its screenshot."""
    seen: list[str] = []
    page.on("pageerror", lambda err: seen.append(f"JavaScript error: {err}"))
    page.on(
        "requestfailed", lambda req: None if req.url.startswith("about:") else seen.append(f"request failed: {req.url}")
    )
    page.on(
        "request",
        lambda req: (
            None if req.url.startswith((base, "data:", "about:")) else seen.append(f"outside request: {req.url}")
        ),
    )
    response = page.goto(base + name, wait_until="load")
    if response is None or response.status != 200:
        seen.append(f"status {None if response is None else response.status}")
    page.wait_for_timeout(100)  # scripts that run on load (search index, MathJax) get to report errors
    state = page.evaluate(_PAGE_STATE)
    if state["text"] == 0:
        seen.append("the page shows no text")
    seen += [f"image not shown: {src}" for src in state["broken"]]
    seen += [f"a line of printed output wraps (it should scroll sideways): {line!r}" for line in state["wrapped"]]
    for output in page.query_selector_all(ERROR_OUTPUT):
        text = output.inner_text()
        if TRACEBACK in text:
            seen.append("a notebook cell raised: " + text.strip().splitlines()[-1][:200])
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot))
    return [Problem(name, what) for what in dict.fromkeys(seen)]


OFFLINE_SEARCH = "python -m http.server -d site"  # what the search box says where the book is opened as files


def check_offline_search(context, site: Path) -> list[Problem]:  # noqa: ANN001 (a Playwright BrowserContext)
    """The home page opened from the file system (README: open site/index.html): search cannot run there (a web
    worker), so the search box must name the command that serves the book (docs/offline.js)."""
    page = context.new_page()
    try:
        page.goto((site / "index.html").resolve().as_uri(), wait_until="load")
        page.wait_for_timeout(200)
        searchable = page.query_selector(".md-search__input") is not None
        told = page.evaluate(
            "() => Array.from(document.querySelectorAll('.md-search__input, .md-search-result__meta'))"
            ".map(e => (e.title || '') + ' ' + e.textContent).join(' ')"
        )
    finally:
        page.close()
    if not searchable or OFFLINE_SEARCH in told:  # a page without a search box has nothing to tell
        return []
    return [Problem("index.html", f"opened from the file system, the search box does not say: {OFFLINE_SEARCH}")]


def check_in_browser(site: Path, shots: Path, names: list[str] | None = None) -> list[Problem]:
    """Open every page (or ``names``) of ``site`` in headless Chromium; screenshots go to ``shots``."""
    from playwright.sync_api import sync_playwright

    site = site.resolve()
    names = names or [p.relative_to(site).as_posix() for p in pages_of(site)]
    shutil.rmtree(shots, ignore_errors=True)
    server, base = _serve(site)
    problems: list[Problem] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
            context = browser.new_context(viewport={"width": 1280, "height": 900})
            for name in names:
                page = context.new_page()
                problems += check_page(page, base, name, shots / (name.replace("/", "__") + ".png"))
                page.close()
            if "index.html" in names:
                problems += check_offline_search(context, site)
            browser.close()
    finally:
        server.shutdown()
    return problems


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--site", default="site", help="the built site (default: site)")
    parser.add_argument("--shots", default="site-check", help="where screenshots go (default: site-check)")
    parser.add_argument("--no-browser", action="store_true", help="check links only")
    args = parser.parse_args(argv)
    site = Path(args.site)
    if not (site / "index.html").is_file():
        print(f"docs-check: {site}/index.html not found: run `make docs` first", file=sys.stderr)
        return 2
    start = time.perf_counter()
    problems, checked = check_links(site)
    print(f"docs-check: {len(pages_of(site))} pages, {checked} links inside the site checked")
    if not args.no_browser:
        missing = browser_missing()
        if missing:
            print(f"docs-check: cannot open the pages: {missing}", file=sys.stderr)
            return 2
        problems += check_in_browser(site, Path(args.shots))
        print(f"docs-check: every page opened in headless Chromium; screenshots in {args.shots}/")
    for problem in problems:
        print(f"docs-check: {problem}")
    print(f"docs-check: {len(problems)} problem(s) in {time.perf_counter() - start:.1f} s")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
