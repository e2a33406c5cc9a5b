"""docs/check_site.py (make docs-check) on a tiny fake site: the link pass always, the browser pass where
Debian's chromium and Playwright are installed."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("check_site", ROOT / "docs" / "check_site.py")
check_site = importlib.util.module_from_spec(spec)
sys.modules["check_site"] = check_site  # dataclasses look their module up
spec.loader.exec_module(check_site)

# a 1x1 PNG
PIXEL = bytes.fromhex(
    "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
    "1f15c4890000000d4944415478da63f8cfc0f01f0005000201a2b1d2e20000000049454e44ae426082"
)
ERROR_CELL = (
    '<div class="jp-RenderedText jp-OutputArea-output" data-mime-type="application/vnd.jupyter.stderr">'
    "<pre>Traceback (most recent call last)\nValueError: boom</pre></div>"
)
WARNING_CELL = ERROR_CELL.replace("Traceback (most recent call last)\nValueError: boom", "UserWarning: only a warning")


def fake_site(root: Path) -> Path:
    """index.html links to a good page, a good anchor, and three broken targets; a/ holds an errored cell."""
    (root / "a").mkdir(parents=True)
    (root / "img").mkdir()
    (root / "img" / "ok.png").write_bytes(PIXEL)
    (root / "index.html").write_text(
        "<html><body><article><h1 id='top'>Home</h1>"
        '<a href="a/">good</a> <a href="a/#sec">good anchor</a> <a href="#top">here</a>'
        '<a href="https://example.org/">outside, not fetched</a> <img src="img/ok.png">'
        '<a href="missing/">broken</a> <a href="a/#nope">broken anchor</a> <img src="img/gone.png">'
        "</article></body></html>"
    )
    (root / "a" / "index.html").write_text(
        f"<html><body><article><h2 id='sec'>Section</h2><a href='../'>up</a>{ERROR_CELL}{WARNING_CELL}</article></body></html>"
    )
    (root / "404.html").write_text("<a href='/nowhere/'>a server-rooted link, not checked</a>")
    return root


def test_link_pass_finds_each_broken_link_image_and_anchor(tmp_path):
    site = fake_site(tmp_path / "site")
    problems, checked = check_site.check_links(site)
    assert sorted(p.what for p in problems) == [
        "broken anchor: a/#nope (no id 'nope' there)",
        "broken image: img/gone.png",
        "broken link: missing/",
    ]
    assert {p.page for p in problems} == {"index.html"}
    assert checked == 8  # every link inside the site, the outside one left out


def test_link_pass_refuses_an_empty_script_src(tmp_path):
    (tmp_path / "index.html").write_text('<script src=""></script><p>text</p>')
    problems, _ = check_site.check_links(tmp_path)
    assert [p.what for p in problems] == ["a <script> with an empty src (it would load the page as a script)"]


def test_main_says_when_the_site_is_not_built(tmp_path, capsys):
    assert check_site.main(["--site", str(tmp_path / "nothing"), "--no-browser"]) == 2
    assert "run `make docs` first" in capsys.readouterr().err


@pytest.mark.skipif(check_site.browser_missing() is not None, reason=f"browser pass: {check_site.browser_missing()}")
def test_browser_pass_finds_the_broken_image_and_the_cell_that_raised(tmp_path):
    site = fake_site(tmp_path / "site")
    shots = tmp_path / "shots"
    problems = check_site.check_in_browser(site, shots)
    found = sorted(str(p) for p in problems)
    assert found == [
        "a/index.html: a notebook cell raised: ValueError: boom",
        "index.html: image not shown: img/gone.png",
    ]
    assert sorted(p.name for p in shots.iterdir()) == ["a__index.html.png", "index.html.png"]
