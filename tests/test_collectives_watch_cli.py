"""MINIDL_COMM_TIMEOUT over the public collectives (issue 32): two ranks in MPI's own Barrier while the third is in
collectives.allreduce hung silently, the watch covering only minidl.train; now the third raises naming its call
and the job ends. So does a job whose last rank passes check=False alone (every rank must pass the same check).
Without the variable that job used to hang without a word; now a rank left in the agreement check says why.
The subprocess's timeout (generous: the machine may be loaded) only keeps a regression from hanging the suite."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = next((p for p in (Path(sys.executable).parent / "mpiexec",) if p.exists()), None)
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")

SCRIPT = """
import numpy as np
from mpi4py import MPI
import collectives
comm = MPI.COMM_WORLD
last = comm.Get_rank() == comm.Get_size() - 1
{body}
"""


def run(body: str, timeout_env: str | None = "2") -> tuple[int, str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("MINIDL_COMM_TIMEOUT", None)
    if timeout_env is not None:
        env["MINIDL_COMM_TIMEOUT"] = timeout_env
    proc = subprocess.run(
        [str(MPIEXEC), "-n", "3", sys.executable, "-c", SCRIPT.format(body=body)],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=str(ROOT),
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_a_rank_in_collectives_allreduce_while_the_others_are_in_mpis_barrier_raises_naming_it():
    code, out = run("collectives.allreduce(comm, np.ones(4)) if last else comm.Barrier()")
    assert code != 0, out
    assert "CommTimeoutError: rank 2 of 3: no progress for" in out and "during collectives.allreduce" in out, out


def test_the_last_rank_passing_check_false_alone_is_named():
    """Its deadline is the shortest (MPMD: 2 s there, 60 s on the others), so its error is the one that ends the job
    (with one deadline for all, whichever rank gives up first ends it: under load not always the last)."""
    body = "collectives.allreduce(comm, np.ones(4), algorithm='ring', check=not last)"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("MINIDL_COMM_TIMEOUT", None)
    one = [sys.executable, "-c", SCRIPT.format(body=body)]
    command = [str(MPIEXEC), "-n", "2", "-env", "MINIDL_COMM_TIMEOUT", "60", *one, ":"]
    command += ["-n", "1", "-env", "MINIDL_COMM_TIMEOUT", "2", *one]
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, env=env, cwd=str(ROOT))
    code, out = proc.returncode, proc.stdout + proc.stderr
    assert code != 0, out
    assert "collectives.allreduce with check=False (every rank must pass the same check)" in out, out


def test_ranks_that_agree_are_unchanged_under_the_watch():
    code, out = run("out = collectives.allreduce(comm, np.ones(4)); assert out.tolist() == [3.0] * 4; print('ok')")
    assert code == 0 and out.count("ok") == 3, out


@pytest.mark.parametrize("algorithm, n", [("ring", 4), ("recursive_doubling", 4), ("tree", 5000)])
def test_without_a_timeout_a_rank_left_in_the_check_says_the_last_rank_skipped_it(algorithm, n):
    """recursive_doubling at 4 floats takes the fast path (fastpath.py's persistent requests), the others the
    handshake; both poll and look for the skipper's messages after agreement.STALL seconds. The job would wait on
    for ever (only MINIDL_COMM_TIMEOUT ends it), so the test ends it once the line is there."""
    body = f"collectives.allreduce(comm, np.ones({n}), algorithm={algorithm!r}, check=not last)"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    env.pop("MINIDL_COMM_TIMEOUT", None)
    command = [str(MPIEXEC), "-n", "3", sys.executable, "-c", SCRIPT.format(body=body)]
    job = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=str(ROOT), start_new_session=True)
    said, deadline = "", time.monotonic() + 120  # generous: the machine may be loaded
    try:
        assert job.stderr is not None
        for line in job.stderr:
            if "has waited" in line or time.monotonic() > deadline:
                said = line
                break
    finally:
        os.killpg(job.pid, signal.SIGKILL)
        job.wait()
    assert "in the agreement check of" in said and "while rank 2 sends it a message" in said, said
    assert "did rank 2 pass check=False" in said and "Every rank must pass the same check" in said, said
