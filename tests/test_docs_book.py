"""docs/book.py (make docs): links rewritten so that a page reads the same on GitHub and in the book."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("book", ROOT / "docs" / "book.py")
book_module = importlib.util.module_from_spec(spec)
sys.modules["book"] = book_module
spec.loader.exec_module(book_module)


def fake_repo(root: Path) -> Path:
    for path in ["README.md", "docs/guide.md", "tutorials/01_intro.py", "pkg/algorithms/ring.py", "pkg/notes.txt"]:
        (root / path).parent.mkdir(parents=True, exist_ok=True)
        (root / path).write_text("x = 1\n")
    return root


def test_markdown_links_go_to_pages_chapters_and_code_pages(tmp_path):
    book = book_module.Book(tmp_path / "out", fake_repo(tmp_path / "repo"))
    text = (
        "[guide](docs/guide.md) [lesson](tutorials/01_intro.py#part-2) [ring](pkg/algorithms/ring.py) "
        "[notes](pkg/notes.txt) [web](https://example.org) [here](#top) `pkg/algorithms/ring.py` `pkg/gone.py`\n"
        "```\n`pkg/algorithms/ring.py` in a fence stays as it is\n```\n"
    )
    out = book.rewrite(text, Path("README.md"))
    assert "[guide](docs/guide.md)" in out
    assert "[lesson](tutorials/01_intro.ipynb#part-2)" in out
    assert "[ring](code/pkg/algorithms/ring.py.md)" in out
    assert "[notes](pkg/notes.txt) [web](https://example.org) [here](#top)" in out  # no page: left alone
    assert "[`pkg/algorithms/ring.py`](code/pkg/algorithms/ring.py.md)" in out
    assert " `pkg/gone.py`" in out  # a path that does not exist is not linked
    assert "```\n`pkg/algorithms/ring.py` in a fence" in out
    assert book.code_pages == {Path("pkg/algorithms/ring.py")}


def test_a_guide_page_links_back_to_the_front_page_and_a_notebook_links_to_html(tmp_path):
    book = book_module.Book(tmp_path / "out", fake_repo(tmp_path / "repo"))
    assert book.rewrite("[home](../README.md)", Path("docs/guide.md")) == "[home](../index.md)"
    # a chapter's Markdown is rendered by nbconvert, which does not resolve .md links: it gets the file itself
    on_chapter = book.rewrite(
        "[ring](../pkg/algorithms/ring.py) [guide](../docs/guide.md)", Path("tutorials/01_intro.py"), urls=True
    )
    assert on_chapter == "[ring](../code/pkg/algorithms/ring.py.html) [guide](../docs/guide.html)"
