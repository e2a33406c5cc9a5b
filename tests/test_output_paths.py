"""Every program's output path is checked, its folders made, before its work (issue 32, parts 3 and 4): the
benchmarks' --json refuse /dev/full in one line (status 2) instead of failing after the whole run."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from collectives.paths import check_output, unwritable

ROOT = Path(__file__).resolve().parents[1]


def test_unwritable_makes_the_folders_and_names_what_is_wrong(tmp_path):
    assert unwritable(str(tmp_path / "a" / "b" / "out.json")) is None and (tmp_path / "a" / "b").is_dir()
    assert unwritable(str(tmp_path)) == "is a folder; give a file name in it"
    (tmp_path / "file").write_text("")
    assert unwritable(str(tmp_path / "file" / "out.json")).startswith(f"cannot make the folder {tmp_path / 'file'}")
    if os.path.exists("/dev/full"):
        assert unwritable("/dev/full") == "cannot be written (No space left on device)"


def test_check_output_is_one_line_and_status_2(tmp_path, capsys):
    check_output("--json", None, "prog")
    with pytest.raises(SystemExit) as stop:
        check_output("--json", str(tmp_path), "prog")
    assert (
        stop.value.code == 2
        and capsys.readouterr().err == f"prog: error: --json {tmp_path}: is a folder; give a file name in it\n"
    )


@pytest.mark.parametrize("script", ["parallel_schemes.py", "scaling.py", "simulate_validation.py"])
def test_a_benchmarks_json_that_cannot_be_written_is_refused_before_its_runs(tmp_path, script):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    bad = str(tmp_path)  # a folder
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / script), "--json", bad],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stderr.strip() == f"{script}: error: --json {bad}: is a folder; give a file name in it", done.stderr
