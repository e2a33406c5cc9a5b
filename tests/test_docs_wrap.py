"""The book's printed output keeps its lines (issue 32, item 3): docs/check_site.py fails a page where a line of
a <pre> wraps (05's words/s table split "compute / wait / comm", 08's "recursive_dou|bling"), and docs/book.css
makes notebook output scroll sideways instead. Needs Chromium and Playwright (the docs extra)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "docs"))
import check_site  # noqa: E402

pytestmark = pytest.mark.skipif(check_site.browser_missing() is not None, reason=str(check_site.browser_missing()))

ROW = "4 ranks, recursive_doubling      41,532 (40,911-42,207)        96%   13.1 / 0.4 / 1.9 [min-max]"
PAGE = """<!doctype html><html><head><style>{css}</style></head><body>
<input class="md-search__input" placeholder="Search"><div class="md-search-result__meta">Initializing search</div>
<article><h1>results</h1>
<div class="jp-OutputArea-output jp-RenderedText" data-mime-type="text/plain" style="width: 320px">
<pre style="white-space: pre-wrap; word-break: break-all">{row}
{row}</pre></div>
<pre><code>short code line</code></pre>
</article><script src="assets/offline.js"></script></body></html>"""


def site_with(tmp_path: Path, css: str, offline: bool = True) -> Path:
    """A one-page site: a narrow output cell of two long lines, a search box as mkdocs-material's, docs/offline.js."""
    site = tmp_path / "site"
    (site / "assets").mkdir(parents=True)
    (site / "index.html").write_text(PAGE.format(css=css, row=ROW))
    if offline:
        (site / "assets" / "offline.js").write_text((ROOT / "docs" / "offline.js").read_text())
    return site


def test_a_wrapped_output_line_is_a_problem(tmp_path):
    problems = check_site.check_in_browser(site_with(tmp_path, ""), tmp_path / "shots", ["index.html"])
    assert [p.what for p in problems] == [f"a line of printed output wraps (it should scroll sideways): {ROW[:60]!r}"]


def test_the_books_css_keeps_output_lines_whole(tmp_path):
    css = (ROOT / "docs" / "book.css").read_text()
    assert check_site.check_in_browser(site_with(tmp_path, css), tmp_path / "shots", ["index.html"]) == []


def test_opened_from_files_the_search_box_names_the_command_that_serves_the_book(tmp_path):
    """README says: open site/index.html. Search cannot run from files; the search box says what to run."""
    css = (ROOT / "docs" / "book.css").read_text()
    problems = check_site.check_in_browser(site_with(tmp_path, css, offline=False), tmp_path / "shots", ["index.html"])
    told = "opened from the file system, the search box does not say: python -m http.server -d site"
    assert [p.what for p in problems if "offline.js" not in p.what] == [told]
