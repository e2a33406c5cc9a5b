"""The data-parallel flags of python -m minidl.train (--overlap, --zero-stage, --timeline) refuse other modes."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--zero-stage", "2"], "--zero-stage applies only to --parallel zero"),
        (["--parallel", "model", "--overlap"], "--overlap applies only to --parallel data"),
        (["--timeline", "t.json"], "--timeline applies only to --parallel data/zero"),
        (["--parallel", "zero", "--zero-stage", "4"], "invalid choice: 4"),
    ],
)
def test_flags_of_another_mode_are_one_line_errors(flags, message):
    done = subprocess.run(
        [sys.executable, "-m", "minidl.train", "lm", "--quick", *flags], capture_output=True, text=True, cwd=ROOT
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr
