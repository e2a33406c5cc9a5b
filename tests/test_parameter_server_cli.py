"""``python -m minidl.train lm|cnn --parallel ps|local-sgd`` under mpiexec for a few steps (subprocesses)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")


def run(*flags: str, ranks: int = 3, program: str = "cnn") -> str:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    proc = subprocess.run(
        [MPIEXEC, "-n", str(ranks), sys.executable, "-m", "minidl.train", program, "--quick", *flags],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def test_async_ps_with_staleness_bound():
    out = run("--parallel", "ps", "--async", "--staleness-bound", "1", "--fetch-every", "2", "--max-steps", "6")
    assert "1 server(s) + 2 workers, asynchronous, staleness bound 1" in out
    m = re.search(r"staleness over (\d+) updates: mean [\d.]+, max (\d+)", out)
    assert m and int(m.group(1)) == 12 and int(m.group(2)) <= 1
    assert re.search(r"rank 0 \(server\) [\d.,]+, rank 1 [\d.,]+, rank 2 [\d.,]+", out)
    assert "test per-label accuracy" in out


def test_local_sgd():
    out = run("--parallel", "local-sgd", "--average-every", "2", "--max-steps", "4", ranks=2)
    assert "local SGD: 2 ranks, parameters averaged every 2 steps" in out
    assert "test per-label accuracy" in out and "KiB sent + received per step: rank 0" in out


def test_lm_sync_ps_with_two_servers():
    out = run("--parallel", "ps", "--servers", "2", "--max-steps", "5", ranks=4, program="lm")
    assert "2 server(s) + 2 workers, synchronous" in out and "test perplexity" in out
    assert re.search(r"rank 0 \(server\) [\d.,]+, rank 1 \(server\) [\d.,]+, rank 2 [\d.,]+", out)
    m = re.search(r"staleness over (\d+) updates: mean 0.00, max 0", out)
    assert m and int(m.group(1)) == 2 * 2 * 5  # per server: 2 workers x 5 steps


def test_bad_flags_are_refused():
    proc = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, "-m", "minidl.train", "cnn", "--parallel", "ps", "--staleness-bound", "2"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode != 0 and "needs --async" in proc.stderr
