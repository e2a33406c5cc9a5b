"""A failing rank brings the whole MPI job down with its error printed, never a hang."""

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import minidl.distributed as dist

MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")

SCRIPT = textwrap.dedent(
    """
    import numpy as np
    import minidl.distributed as dist

    def main(mode):
        comm = dist.init()
        if dist.rank() == 1:
            raise ValueError("rank one gave up: bad batch shape (3, 7)")
        buf = np.zeros(4)
        if mode == "recv":
            comm.Recv(buf, source=1)      # would wait forever for the dead rank
        else:
            opt_grad = np.ones(4)
            dist.allreduce(comm, opt_grad, "ring")   # a collective the dead rank never joins

    import sys
    if sys.argv[1] == "hook":
        dist.install_excepthook()
        main("recv")
    else:
        dist.run(main, sys.argv[1])
    """
)


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
@pytest.mark.parametrize("mode", ["recv", "allreduce", "hook"])
def test_failing_rank_aborts_job(tmp_path, mode):
    script = tmp_path / "fail.py"
    script.write_text(SCRIPT)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    proc = subprocess.run(
        [MPIEXEC, "-n", "2", sys.executable, str(script), mode],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "[rank 1 of 2]" in out, out
    assert "ValueError: rank one gave up: bad batch shape (3, 7)" in out, out


def test_run_without_mpi_reraises(capsys):
    class NoAbort:
        def Get_rank(self):
            return 3

        def Get_size(self):
            return 4

    def main():
        raise RuntimeError("boom")

    with pytest.raises(RuntimeError, match="boom"):
        dist.run(main, comm=NoAbort())
    err = capsys.readouterr().err
    assert "[rank 3 of 4]" in err and "RuntimeError: boom" in err
    assert dist.run(lambda x: x + 1, 1, comm=NoAbort()) == 2
