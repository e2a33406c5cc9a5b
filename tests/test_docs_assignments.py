"""docs/assignments.md's worked example, held to the program's real output: the page's four submissions are
written to a folder, the page's grading command is run on them, and its table (all but the seconds), its
progress lines and the JSON row it shows must be what the command prints and writes."""

import json
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PAGE = (ROOT / "docs" / "assignments.md").read_text()
FILES = re.compile(r"```python\n# (hw3/\w+\.py)\n(.*?)```", re.S)
RUN = re.compile(r"```\n\$ (python -m collectives\.check --grade [^\n]*)\n(.*?)```", re.S)
TIMES = re.compile(r"\d+\.\d s|ETA \d+:\d\d")


def _table(text: str) -> list[list[str]]:
    """The table's rows, cells split at two or more spaces, the seconds column left out."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("submission"))
    end = next(i for i, line in enumerate(lines) if re.match(r"\d+ of \d+ passed", line))
    return [re.split(r"\s{2,}", line.strip())[:-1] for line in lines[start:end]] + [[lines[end]]]


def test_the_worked_example_is_what_the_grading_run_prints(tmp_path):
    files = FILES.findall(PAGE)
    assert [name for name, _ in files] == ["hw3/ana.py", "hw3/ben.py", "hw3/carl.py", "hw3/dora.py"]
    for name, source in files:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(source)
    command, shown = RUN.search(PAGE).groups()
    cmd = [sys.executable, *command.split()[1:]]
    done = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert _table(done.stdout) == _table(shown), done.stdout
    progress = [TIMES.sub("", line) for line in done.stdout.splitlines() if line.startswith(("[", "grading", "full"))]
    assert progress == [TIMES.sub("", line) for line in shown.splitlines() if line.startswith(("[", "grading", "full"))]
    row = json.loads(re.search(r"```json\n(.*?)```", PAGE, re.S).group(1))
    written = next(
        r for r in json.loads((tmp_path / "grades.json").read_text()) if r["submission"] == row["submission"]
    )
    assert set(written) == set(row)
    assert {k: v for k, v in written.items() if "seconds" not in k} == {
        k: v for k, v in row.items() if "seconds" not in k
    }
