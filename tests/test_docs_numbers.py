"""The numbers in README.md and docs/ that a command regenerates are re-run and compared here, so they hold
on another machine; and README.md stays a front page (issue 25: at most 150 lines, no table cell over 300)."""

import re
import shlex
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def blocks_after(page: Path, heading: str) -> list[str]:
    """The fenced blocks of ``page`` between ``heading`` and the next heading of the same level."""
    section = page.read_text().split(heading, 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```[a-z]*\n(.*?)```", section, flags=re.S)


def test_the_scaling_table_is_what_its_command_prints():
    command, table = blocks_after(ROOT / "docs" / "scaling.md", "## Zaremba's small LM on 1GbE and on InfiniBand")[:2]
    argv = shlex.split(command.replace("\\\n", " "))
    assert argv[:3] == ["python", "-m", "minidl.simulate"] and any(a.startswith("params=") for a in argv)
    out = subprocess.run(
        [sys.executable, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120, check=True
    ).stdout
    printed = out.splitlines()[: len(table.splitlines())]
    assert printed == table.splitlines()


def test_readme_is_a_front_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 150
    cells = [c for line in text.splitlines() if line.startswith("|") for c in line.split("|")]
    assert max(map(len, cells), default=0) <= 300
    assert "make demo" in text and "make test" in text
