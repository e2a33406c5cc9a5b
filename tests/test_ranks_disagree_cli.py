"""Disagreeing ranks under real MPI processes (mpiexec): MPMD command lines, a failure before dist.init(),
a rank that stops early. Each job must end quickly with a clear message, never hang (issue 11)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
TRAIN = [sys.executable, "-m", "minidl.train", "lm", "--quick", "--parallel", "data"]


def mpiexec(args, timeout=120, env=None):
    start = time.perf_counter()
    proc = subprocess.run(
        [MPIEXEC, *args], capture_output=True, text=True, timeout=timeout, env=env or ENV, cwd=str(ROOT)
    )
    return proc, proc.stdout + proc.stderr, time.perf_counter() - start


@pytest.mark.parametrize("flag, values", [("--max-steps", ("20", "25")), ("--lr", ("1", "2"))])
def test_mpmd_ranks_with_different_flags_stop_at_once_naming_the_flag(flag, values):
    """Case 1 (MPMD --max-steps 20 : --max-steps 25) and case 4 (--lr 1 : --lr 2): refused before training."""
    a, b = values
    proc, out, _ = mpiexec(["-n", "1", *TRAIN, flag, a, ":", "-n", "1", *TRAIN, flag, b])
    assert proc.returncode == 2, out
    assert f"first difference at {flag}" in out and f"ranks [0]: {float(a) if flag == '--lr' else a}" in out, out
    assert out.count("error:") == 1 and "Traceback" not in out, out


def test_a_usage_error_prints_one_line_once_with_the_rank(tmp_path):
    (tmp_path / "a-file").write_text("")
    proc, out, _ = mpiexec(["-n", "2", *TRAIN, "--save", str(tmp_path / "a-file" / "c.npz")])
    assert proc.returncode == 2, out
    assert out.count("error:") == 1 and "[rank 0 of 2]" in out and "cannot make the folder" in out, out
    assert "Traceback" not in out


def test_an_exception_before_dist_init_aborts_the_job():
    """Case 10: dist.run(main) where main raises before dist.init(): the rank and the error, and no hang."""
    script = textwrap.dedent(
        """
        import minidl.distributed as dist

        def main():
            import os
            if os.environ.get("PMI_RANK") == "1":
                raise RuntimeError("bad configuration on this rank")
            dist.init()
            dist.barrier()

        dist.run(main)
        """
    )
    proc, out, seconds = mpiexec(["-n", "2", sys.executable, "-c", script], timeout=60)
    assert proc.returncode != 0, out
    assert "[rank 1 of 2] aborting the job" in out and "RuntimeError: bad configuration on this rank" in out, out


def test_a_rank_that_stops_early_times_out_naming_the_step(tmp_path):
    """Case 1 with real processes: rank 0 takes 2 steps, rank 1 three; MINIDL_COMM_TIMEOUT ends the job."""
    script = textwrap.dedent(
        """
        import numpy as np
        import minidl, minidl.distributed as dist
        from minidl import nn, optim

        def main():
            comm = dist.init()
            minidl.manual_seed(0)
            model = nn.Linear(4, 2)
            opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1))
            for _ in range(2 + comm.Get_rank()):
                opt.zero_grad()
                (model(minidl.tensor(np.ones((3, 4)))) ** 2).mean().backward()
                opt.step()
            if comm.Get_rank() == 0:
                import time
                time.sleep(30)  # still alive, but not in the collective rank 1 waits in

        dist.run(main)
        """
    )
    proc, out, seconds = mpiexec(["-n", "2", sys.executable, "-c", script], env={**ENV, "MINIDL_COMM_TIMEOUT": "2"})
    assert proc.returncode != 0, out
    assert "CommTimeoutError" in out and "DistributedOptimizer.step at step 2" in out and "rank 0" in out, out
    assert seconds < 25, seconds  # the timeout ended it, not rank 0's sleep
