"""``make`` alone (or ``make help``) lists every target of the Makefile, one line each (issue 32, item 7)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")


def makefile_targets() -> set[str]:
    """The targets a user types: the .PHONY ones, which are every named rule (files such as the stamp are not)."""
    text = (ROOT / "Makefile").read_text()
    phony = set(re.search(r"^\.PHONY:(.*)$", text, re.M).group(1).split())
    rules = set(re.findall(r"^([a-z][a-z-]*):", text, re.M))
    assert rules <= phony, f"rules missing from .PHONY: {sorted(rules - phony)}"
    return phony - {"help"}


@pytest.mark.skipif(MAKE is None, reason="make not found")
@pytest.mark.parametrize("argv", [[], ["help"]])
def test_make_alone_lists_every_target_one_line_each(argv):
    done = subprocess.run([MAKE, "-s", *argv], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "make TARGET, one of:"
    listed = [line.split()[0] for line in lines[1:]]
    assert sorted(listed) == sorted(makefile_targets())  # each target once, no target that does not exist
    assert all(len(line.split(None, 1)) == 2 and len(line) <= 120 for line in lines[1:])  # a name and what it does


def test_the_docs_table_names_every_target():
    table = (ROOT / "docs" / "using.md").read_text()
    missing = [t for t in makefile_targets() if f"`make {t}`" not in table]
    assert not missing, f"docs/using.md's table of targets lacks {missing}"
