"""A parameter server outlives a worker that really dies (issue 16, item 5): ``--inject-failure W:STEP`` makes the
worker ``os._exit`` mid-run, under ``mpiexec -disable-auto-cleanup`` (MPICH: the other ranks keep running; without
it the launcher ends the whole job). Asynchronous, and synchronous with ``--drop-lost-workers``: the servers go on
without it, the ranks left finish and print the test perplexity. Synchronous without it: one line naming the
worker, and the job ends non-zero. Every wait is bounded by MINIDL_COMM_TIMEOUT (a worker silent half of it is
lost), so nothing hangs.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
TIMEOUT = 20  # MINIDL_COMM_TIMEOUT: a worker silent 10 s is lost (far above a step on a loaded 2-core machine)


def hydra_keeps_ranks() -> bool:
    """MPICH's launcher (hydra) has ``-disable-auto-cleanup``; Open MPI's mpiexec does not."""
    if MPIEXEC is None:
        return False
    helptext = subprocess.run([MPIEXEC, "-h"], capture_output=True, text=True, timeout=30)
    return "-disable-auto-cleanup" in helptext.stdout + helptext.stderr


pytestmark = pytest.mark.skipif(
    not hydra_keeps_ranks(),
    reason="needs MPICH's mpiexec -disable-auto-cleanup (the other ranks outlive a dead one; Open MPI: --with-ft ulfm)",
)


def run(*flags: str, ranks: int = 4) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MINIDL_COMM_TIMEOUT": str(TIMEOUT)}
    command = [MPIEXEC, "-disable-auto-cleanup", "-n", str(ranks), sys.executable, "-m", "minidl.train", "lm"]
    command += ["--quick", "--parallel", "ps", "--max-steps", "12", *flags]
    return subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=3 * TIMEOUT + 30)


def finished_without(proc: subprocess.CompletedProcess, worker: int, ranks_left: int) -> None:
    out = proc.stdout + proc.stderr
    assert f"[rank {worker}] --inject-failure: exiting abruptly at step 4" in proc.stderr, out
    assert f"parameter server 0: worker(s) {worker} lost (silent {TIMEOUT / 2:g} s)" in proc.stderr, out
    assert f"worker(s) {worker} lost: finished on the {ranks_left} ranks left" in proc.stdout, out
    assert "test perplexity" in proc.stdout and "12 steps in" in proc.stdout, out
    # the survivors end with status 0; hydra's is the highest of the ranks', the lost one's os._exit(1)
    assert proc.returncode == 1, out


def test_async_servers_go_on_without_a_dead_worker():
    proc = run("--async", "--inject-failure", "3:4")
    finished_without(proc, worker=3, ranks_left=3)


def test_sync_servers_drop_a_dead_worker_when_told():
    proc = run("--drop-lost-workers", "--inject-failure", "1:4")  # the first worker: the one that prints progress
    finished_without(proc, worker=1, ranks_left=3)
    assert "staleness over" in proc.stdout and "mean 0.00, max 0" in proc.stdout


def test_sync_servers_otherwise_end_the_job_naming_the_dead_worker():
    proc = run("--inject-failure", "2:4", ranks=3)
    out = proc.stdout + proc.stderr
    named = (
        "minidl: parameter server 0 (synchronous): worker(s) 2 sent nothing for 10 s; the step cannot complete "
        "(--drop-lost-workers goes on without them)"
    )
    assert named in proc.stderr.splitlines(), out
    assert proc.returncode != 0 and "test perplexity" not in proc.stdout and "Traceback" not in out, out
