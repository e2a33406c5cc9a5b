"""Assemble the book's sources for mkdocs: ``make docs`` runs this, then ``mkdocs build``.

The book is made of what the repository already holds, so nothing is written twice:

- README.md is the front page (``index.md``); ``docs/*.md`` are the guide's pages;
- each executed tutorial notebook (``tutorials/notebooks/NN_topic.ipynb``, from ``make notebooks``)
  is a chapter, with a header naming its command, its source and the algorithm pages it runs;
- every source file a page names (a Markdown link or a backticked path such as ``collectives/algorithms/ring.py``)
  gets a code page, and so does every algorithm page of ``collectives``, which names the chapters that
  run it;
- MathJax (the chapters' LaTeX) is copied from the jupyter-server-mathjax package: the book needs no CDN.

Links are rewritten on the way, so a page reads the same on GitHub and in the book: a link to a
``.py`` file (or a backticked path) goes to its code page, a link to a tutorial's script to its chapter,
a link to README.md to the front page. Everything lands in ``build/book`` with a generated
``build/mkdocs.yml`` (the repository's mkdocs.yml, INHERITed, plus the navigation).

    python docs/book.py [--out build]
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import re
import shutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# The guide's pages in reading order; a page of docs/ not named here follows them, by name.
GUIDE = [
    "using.md",
    "core.md",
    "training.md",
    "pytorch-names.md",
    "collectives.md",
    "testing-collectives.md",
    "assignments.md",
    "exercises.md",
    "cluster.md",
    "scaling.md",
    "simulator-validation.md",
    "benchmarks.md",
    "layout.md",
]
# collectives' algorithm pages (one schedule per file), found wherever in collectives/ they live
ALGORITHMS = [
    "naive",
    "tree",
    "ring",
    "recursive_doubling",
    "rabenseifner",
    "fold",
    "dissemination",
    "exchange",
    "prefix",
    "hierarchical",
]
LINK = re.compile(r"(!?\[[^\]]*\])\(([^)\s]+)\)")
TICKED = re.compile(r"(?<![\[\w])`([A-Za-z0-9_./-]+\.(?:py|sbatch|pbs|cfg|toml|yml))`(?!\])")
CODE_LANG = {".py": "python", ".sbatch": "bash", ".pbs": "bash", ".cfg": "ini", ".toml": "toml", ".yml": "yaml"}


def algorithm_files(root: Path = ROOT) -> dict[str, Path]:
    """Each algorithm's name -> its file under collectives/ (repository-relative)."""
    found = {}
    for name in ALGORITHMS:
        hits = sorted(p for p in (root / "collectives").rglob(f"{name}.py") if "__pycache__" not in p.parts)
        if hits:
            found[name] = hits[0].relative_to(root)
    return found


class Book:
    """The pages being assembled: where each repository file lands in the book, and what it links to."""

    def __init__(self, out: Path, root: Path = ROOT):
        self.root, self.out, self.docs = root, out, out / "book"
        self.chapters = {p.stem: p for p in sorted((root / "tutorials").glob("[0-9][0-9]_*.py"))}
        self.code_pages: set[Path] = set()  # repository paths that need a code page
        self.run_by: dict[Path, list[str]] = {}  # an algorithm page -> the chapters that run it (their stems)

    def page_of(self, repo_path: Path) -> Path | None:
        """The book page (relative to the book's root) for a repository file, or None if it has none."""
        if repo_path == Path("README.md"):
            return Path("index.md")
        if repo_path.parts[:1] == ("docs",) and repo_path.suffix == ".md":
            return repo_path
        if repo_path.parent == Path("tutorials") and repo_path.stem in self.chapters:
            return Path("tutorials") / f"{repo_path.stem}.ipynb"
        if (self.root / repo_path).is_file() and repo_path.suffix in CODE_LANG:
            self.code_pages.add(repo_path)
            return Path("code") / f"{repo_path}.md"
        return None

    def link(self, target: str, here: Path, urls: bool = False) -> str:
        """Rewrite one link target written on the repository page ``here`` (a repository path).

        Markdown pages link to pages (``../code/collectives/algorithms/ring.py.md``: mkdocs turns that into a URL);
        notebooks (``urls=True``) link to the page's file (``../code/.../ring.py.html``, mkdocs.yml's
        ``use_directory_urls: false``), since nbconvert renders their Markdown and resolves nothing.
        """
        if re.match(r"^[a-z]+:|^#|^/", target):
            return target
        path, _, anchor = target.partition("#")
        page = self.page_of(Path(os.path.normpath(here.parent / path)))
        if page is None:
            return target
        start = self.page_of(here) or here
        rel = _relative(_html(page) if urls else page, start)
        return rel + (f"#{anchor}" if anchor else "")

    def rewrite(self, text: str, here: Path, urls: bool = False) -> str:
        """Rewrite a page's Markdown links, and turn backticked repository paths into links."""
        text = LINK.sub(lambda m: f"{m.group(1)}({self.link(m.group(2), here, urls)})", text)

        def tick(m: re.Match[str]) -> str:
            repo_path = Path(m.group(1))
            if not (self.root / repo_path).is_file() or self.page_of(repo_path) is None:
                return m.group(0)
            return f"[{m.group(0)}]({self.link(_relative(repo_path, here), here, urls)})"

        return _outside_fences(text, lambda chunk: TICKED.sub(tick, chunk))

    def write(self, page: Path, text: str) -> None:
        dest = self.docs / page
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)


def _html(page: Path) -> Path:
    """The file a page becomes (mkdocs.yml: use_directory_urls false): ``docs/cluster.md`` -> ``docs/cluster.html``."""
    return page.parent / (page.name.rsplit(".", 1)[0] + ".html")


def _relative(target: Path, start_page: Path) -> str:
    """``target`` relative to the folder of ``start_page`` (both relative to the same root)."""
    up = len(start_page.parent.parts)
    return "/".join([".."] * up + list(target.parts))


def _outside_fences(text: str, fn) -> str:
    """Apply ``fn`` to the parts of Markdown ``text`` outside fenced code blocks."""
    pieces = re.split(r"(^```.*?^```[^\n]*$)", text, flags=re.M | re.S)
    return "".join(p if i % 2 else fn(p) for i, p in enumerate(pieces))


def chapter_header(book: Book, script: Path, algorithms: dict[str, Path]) -> str:
    """The Markdown cell put above a chapter: its command, its source, the algorithm pages it runs."""
    source = script.read_text()
    run = re.search(r"^# run: (mpiexec .*)$", source, flags=re.M)
    command = run.group(1) if run else f"python tutorials/{script.name}"
    here = Path("tutorials") / f"{script.stem}.ipynb"
    parts = [
        f"Run it: `{command}` (`--quick` for a seconds-long run). "
        f"Source: [tutorials/{script.name}]({_code_link(book, Path('tutorials') / script.name, here)})."
    ]
    used = sorted(set(_string_literals(source)) & set(algorithms))
    for name in used:
        book.run_by.setdefault(algorithms[name], []).append(script.stem)
    if used:
        links = ", ".join(f"[{name}]({_code_link(book, algorithms[name], here)})" for name in used)
        parts.append(f"The algorithm pages this lesson runs: {links}.")
    return "> **This chapter.** " + " ".join(parts)  # nbconvert renders Markdown, not admonitions


def _code_link(book: Book, repo_path: Path, here: Path) -> str:
    """The URL of ``repo_path``'s code page, relative to the chapter ``here`` (a book page)."""
    book.code_pages.add(repo_path)
    return _relative(_html(Path("code") / f"{repo_path}.md"), here)


def _string_literals(source: str) -> list[str]:
    return [n.value for n in ast.walk(ast.parse(source)) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def add_chapter(book: Book, script: Path, algorithms: dict[str, Path]) -> str:
    """Copy the executed notebook of ``script`` into the book with its header; returns its title."""
    executed = book.root / "tutorials" / "notebooks" / f"{script.stem}.ipynb"
    if not executed.is_file():
        raise SystemExit(f"book: {executed.relative_to(book.root)} is missing: run `make notebooks` first")
    notebook = json.loads(executed.read_text())
    here = Path("tutorials") / script.name
    title = script.stem
    for cell in notebook["cells"]:
        if cell["cell_type"] == "markdown":
            text = book.rewrite("".join(cell["source"]), here, urls=True)
            cell["source"] = text
            heading = re.search(r"^# (.+)$", text, flags=re.M)
            if heading and title == script.stem:
                title = heading.group(1).split(":")[0].strip()  # the nav's title: "04 - Allreduce"
    header = {"cell_type": "markdown", "metadata": {}, "source": chapter_header(book, script, algorithms)}
    first_heading = next((i for i, c in enumerate(notebook["cells"]) if c["cell_type"] == "markdown"), -1)
    notebook["cells"].insert(first_heading + 1, header)
    book.write(Path("tutorials") / f"{script.stem}.ipynb", json.dumps(notebook, indent=1))
    return title


def add_code_page(book: Book, repo_path: Path) -> None:
    """A page showing one repository file: where it lives, the chapters that run it, then the file."""
    text = (book.root / repo_path).read_text()
    page = Path("code") / f"{repo_path}.md"
    about = f"`{repo_path.as_posix()}` in the repository, {len(text.splitlines())} lines."
    chapters = book.run_by.get(repo_path, [])
    if chapters:
        links = ", ".join(f"[{stem}]({_relative(Path('tutorials') / f'{stem}.ipynb', page)})" for stem in chapters)
        about += f" Run in the chapters {links}."
    fence = f'```{CODE_LANG[repo_path.suffix]} linenums="1"\n{text}\n```\n'
    # no table of contents beside a code page: the code gets the width
    book.write(page, f"---\nhide: [toc]\n---\n\n# {repo_path.as_posix()}\n\n{about}\n\n{fence}")


def copy_mathjax(dest: Path) -> None:
    """MathJax 2 (the notebooks' LaTeX) from the jupyter-server-mathjax package, so the book needs no CDN."""
    try:
        import jupyter_server_mathjax
    except ImportError:
        raise SystemExit("book: jupyter-server-mathjax is missing: pip install -e '.[docs]'") from None
    shutil.copytree(Path(jupyter_server_mathjax.__file__).parent / "static", dest)
    # the package ships the STIX-Web fonts only (as Jupyter configures it); mkdocs.yml loads this config
    (dest / "config" / "minidl.js").write_text(
        'MathJax.Hub.Config({"HTML-CSS": {availableFonts: ["STIX-Web"], preferredFont: "STIX-Web",'
        ' webFont: "STIX-Web", imageFont: null}});\nMathJax.Ajax.loadComplete("[MathJax]/config/minidl.js");\n'
    )


def _title(markdown: str, default: str) -> str:
    heading = re.search(r"^# (.+)$", markdown, flags=re.M)
    return heading.group(1).strip() if heading else default


def assemble(out: Path, root: Path = ROOT) -> Path:
    """Write the book's sources under ``out/book`` and ``out/mkdocs.yml``; returns the config's path."""
    book = Book(out, root)
    shutil.rmtree(book.docs, ignore_errors=True)
    book.write(Path("index.md"), book.rewrite((root / "README.md").read_text(), Path("README.md")))
    guide = []
    order = {name: i for i, name in enumerate(GUIDE)}
    pages = sorted((root / "docs").glob("*.md"), key=lambda p: (order.get(p.name, len(GUIDE)), p.name))
    for page in pages:
        text = page.read_text()
        book.write(Path("docs") / page.name, book.rewrite(text, Path("docs") / page.name))
        guide.append({_title(text, page.stem): f"docs/{page.name}"})
    algorithms = algorithm_files(root)
    chapters = [{add_chapter(book, s, algorithms): f"tutorials/{s.stem}.ipynb"} for s in book.chapters.values()]
    book.code_pages.update(algorithms.values())
    for repo_path in sorted(book.code_pages):
        add_code_page(book, repo_path)
    copy_mathjax(book.docs / "assets" / "mathjax")
    for asset in ("book.css", "offline.js"):  # mkdocs.yml's extra_css and extra_javascript
        shutil.copy(root / "docs" / asset, book.docs / "assets" / asset)
    nav_algorithms = [{name: f"code/{path}.md"} for name, path in algorithms.items()]
    nav = [{"Home": "index.md"}, {"Tutorials": chapters}, {"Guide": guide}, {"Algorithm pages": nav_algorithms}]
    return write_config(out, root, nav)


def write_config(out: Path, root: Path, nav: list) -> Path:
    """``out/mkdocs.yml``: the repository's mkdocs.yml (INHERIT) with the book's folders and navigation."""
    config = out / "mkdocs.yml"
    settings = {
        "INHERIT": os.path.relpath(root / "mkdocs.yml", out),
        "docs_dir": "book",
        "site_dir": os.path.relpath(root / "site", out),
        "nav": nav,
    }
    config.write_text("# written by docs/book.py; JSON is YAML\n" + json.dumps(settings, indent=1) + "\n")
    return config


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="build", help="folder for the assembled sources (default: build)")
    args = parser.parse_args(argv)
    config = assemble((ROOT / args.out).resolve())
    print(f"book: sources in {config.parent / 'book'}; build with `mkdocs build -f {config}`")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
