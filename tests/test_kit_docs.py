"""The kit's documented output and property list are the program's (issues 31, 32, 34): the example of
docs/testing-collectives.md, run as a reader would, prints every line the page shows, and every page
that lists the properties lists PROPERTIES."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import collectives.kit.run
from collectives.testing import PROPERTIES

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "testing-collectives.md"


def _blocks(text: str, lang: str) -> list[str]:
    return [body for kind, body in re.findall(r"```(\w*)\n(.*?)```", text, re.S) if kind == lang]


def _same_line(shown: str, real: str) -> bool:
    """A step row lists one step's messages in the order the threads ran: compare them as a set."""
    if shown.lstrip().startswith("step") and real.lstrip().startswith("step"):
        head, _, rest = shown.partition(": ")
        real_head, _, real_rest = real.partition(": ")
        return head == real_head and set(rest.split(" | ")) == set(real_rest.split(" | "))
    return shown == real


def test_the_documented_example_is_what_the_program_prints(tmp_path):
    text = PAGE.read_text()
    source = next(b for b in _blocks(text, "python") if "def my_allreduce" in b)
    (tmp_path / "my_ring.py").write_text(source)
    shown = next(b for b in _blocks(text, "") if b.startswith("$ python -m collectives.check my_ring.py"))
    command, *lines = shown.strip().splitlines()
    env = dict(os.environ, OMP_NUM_THREADS="1")
    args = command.removeprefix("$ python ").split()
    out = subprocess.run([sys.executable, *args], capture_output=True, text=True, cwd=tmp_path,
                         env=env, timeout=300)  # fmt: skip
    real = out.stdout.splitlines()
    assert out.returncode == 1, out.stdout + out.stderr
    for line in lines:
        if "..." in line:  # elided by the page: its start must still match a line
            start = line.split("...")[0].rstrip()
            assert not start.strip() or any(r.startswith(start) for r in real), (line, out.stdout)
        else:
            assert any(_same_line(line, r) for r in real), (line, out.stdout)


def test_every_page_that_lists_the_properties_lists_properties():
    text = PAGE.read_text()
    section = text[text.index("## The properties") : text.index("## What is drawn")]
    table = re.findall(r"^\| ([a-z-]+) \|", section, re.M)
    assert [p for p in table if p != "property"] == list(PROPERTIES)
    doc = collectives.kit.run.__doc__ or ""
    assert [line.split()[0] for line in doc.splitlines()[2:] if line[:1].isalpha() and "  " in line][
        : len(PROPERTIES)
    ] == list(PROPERTIES)
