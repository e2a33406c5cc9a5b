"""Do the numbers in README.md and docs/ still come out of their commands? Re-run the cheap ones and compare.

    python benchmarks/docs_numbers.py          # exit 0: every number checked holds; 1: each one that does not

Checked, because they are the same on any machine (counted or computed, not timed):

- every simulator table printed after its command, where the command describes the node
  (``python -m minidl.simulate ... --profile params=N,rate=R,batch=B ...``): the table's lines, exactly;
- the ZeRO bytes of ``benchmarks/zero.py`` at P = 4 quoted in prose ("plain data parallelism 74.45 MB, stage 1
  51.19 MB, ..."): each to the digit.

A measured profile's numbers depend on the machine and its load, so a document quotes them with their date and
machine, and they are not checked here (``minidl/simulate/profile.py`` refuses a profile taken on a busy machine).
"""

from __future__ import annotations

import contextlib
import glob
import io
import os
import re
import shlex
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

# a ```sh block with a described simulator run, then the next fenced block: its output
SIMULATED = re.compile(
    r"```sh\n(python -m minidl\.simulate [^`]*?--profile params=[^`]*?)```\s*\n```[a-z]*\n(.*?)```", re.S
)
ZERO = re.compile(
    r"benchmarks/zero\.py.*?plain data parallelism ([\d.]+) MB,\s+stage 1 ([\d.]+) MB,\s+stage 2 ([\d.]+) MB,"
    r"\s+stage 3 ([\d.]+) MB",
    re.S,
)


def documents() -> dict[str, str]:
    """README.md and docs/*.md: path (relative to the repository) -> text."""
    paths = [os.path.join(ROOT, "README.md"), *sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))]
    texts = {}
    for path in paths:
        if os.path.isfile(path):
            with open(path, encoding="utf-8") as f:
                texts[os.path.relpath(path, ROOT)] = f.read()
    return texts


def simulate_output(command: str) -> str:
    """What ``python -m minidl.simulate ARGS`` prints (run in this process; backslash-continued lines joined)."""
    from minidl.simulate.cli import main

    words = shlex.split(command.replace("\\\n", " "))[3:]
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        main(words)
    return out.getvalue()


def check_simulated(path: str, text: str) -> tuple[int, list[str]]:
    """The described simulator tables of one document: (how many, the problems)."""
    found, problems = 0, []
    for command, table in SIMULATED.findall(text):
        found += 1
        now = [line.rstrip() for line in simulate_output(command).splitlines()]
        for line in table.strip("\n").splitlines():
            if line.rstrip() not in now:
                problems.append(f"{path}: {command.split(chr(10))[0]} ... no longer prints: {line.strip()}")
    return found, problems


def check_zero(path: str, text: str, rows: list[dict] | None = None) -> tuple[int, list[str]]:
    """The ZeRO bytes at P = 4 quoted in one document: (how many quotes, the problems)."""
    quotes = ZERO.findall(text)
    if not quotes:
        return 0, []
    if rows is None:
        from benchmarks.zero import table

        rows = table(4)
    now = [f"{row['total'] / 1e6:.2f}" for row in rows]
    problems = [
        f"{path}: benchmarks/zero.py at P = 4 now gives {' / '.join(now)} MB, the text says {' / '.join(quote)}"
        for quote in quotes
        if list(quote) != now
    ]
    return len(quotes), problems


def main() -> int:
    checked, problems = 0, []
    for path, text in documents().items():
        for check in (check_simulated, check_zero):
            n, wrong = check(path, text)
            checked, problems = checked + n, problems + wrong
    for line in problems:
        print(line)
    print(f"{checked} documented results re-run; {len(problems)} number(s) that no longer hold")
    return 1 if problems or not checked else 0


if __name__ == "__main__":
    sys.exit(main())
