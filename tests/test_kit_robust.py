"""The kit's command line under bad input (issue 31, part 5): a file that will not import, option values that
cannot run, a diagram's folder that is missing, and a usage error on one rank of an MPMD job. Each is one
line and exit status 2 before any case runs, or a report that is still printed; never a traceback or a hang."""

import os
import subprocess
import sys

import pytest

from collectives.check import main
from collectives.testing import PropertyFailure, check

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")
RING = "from collectives import ring\n\ndef allreduce(comm, x, f):\n    return ring.allreduce(comm, x, f)\n"
WRONG = RING.replace("return ring.allreduce(comm, x, f)", "return ring.allreduce(comm, x, f) + comm.Get_rank()")


@pytest.mark.parametrize(
    "source, words",
    [
        ("def allreduce(comm, x, f)\n    return x\n", "SyntaxError at"),
        ("import numpy\nx = 1 / 0\n", "ZeroDivisionError: division by zero at"),
        ("import sys\nsys.exit(0)\n", "SystemExit: 0 at"),
    ],
)
def test_a_file_that_fails_to_import_is_one_line_and_status_2(tmp_path, capsys, source, words):
    path = tmp_path / "hw.py"
    path.write_text(source)
    assert main([f"{path}:allreduce"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and words in err and f"cannot import {path}" in err and "Traceback" not in err, err
    if "at" in words.split()[-1]:
        assert f"{path}:2" in err or f"{path}:1" in err  # the user's line, not the kit's


@pytest.mark.parametrize(
    "option, words",
    [
        (["--seed", "-5"], "--seed -5"),
        (["--cost", "bogus"], "--cost bogus: not a package algorithm"),
        (["--timeout", "-1"], "--timeout -1"),
        (["--timeout", "nan"], "--timeout nan"),
        (["--max-ranks", "0"], "--max-ranks"),
        (["--max-ranks", "1000"], "--max-ranks 1000: the in-process ranks are threads"),
    ],
)
def test_bad_option_values_are_one_usage_line_before_any_case(tmp_path, capsys, option, words):
    path = tmp_path / "ring.py"
    path.write_text(RING)
    with pytest.raises(SystemExit) as stop:
        main([f"{path}:allreduce", *option])
    assert stop.value.code == 2
    err = capsys.readouterr().err
    assert [line for line in err.splitlines() if "error:" in line] == [line for line in err.splitlines()][-1:]
    assert words in err and "Traceback" not in err, err


def test_a_diagram_into_a_missing_folder_is_drawn_there_and_a_blocked_one_keeps_the_report(tmp_path):
    ns: dict = {}
    exec(WRONG, ns)
    target = tmp_path / "new" / "folder" / "failure.png"
    with pytest.raises(PropertyFailure) as failure:
        check(ns["allreduce"], examples=2, seed=1, diagram=str(target))
    assert target.is_file() and failure.value.diagram == str(target)
    (tmp_path / "afile").write_text("")
    with pytest.raises(PropertyFailure) as failure:
        check(ns["allreduce"], examples=2, seed=1, diagram=str(tmp_path / "afile" / "failure.png"))
    text = str(failure.value)
    assert "space-time diagram not saved" in text and "expected against got" in text and failure.value.diagram is None


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="needs mpiexec (the mpich wheel)")
def test_a_usage_error_on_one_rank_of_an_mpmd_job_ends_every_rank(tmp_path):
    """Was a hang: rank 0 waited in the seed's broadcast for the rank that had printed its error and left."""
    good = tmp_path / "good.py"
    good.write_text(RING)
    check_cmd = [sys.executable, "-m", "collectives.check"]
    for bad in ([str(tmp_path / "missing.py:allreduce"), "--mpi"], [f"{good}:allreduce", "--mpi", "--seed", "-1"]):
        cmd = [MPIEXEC, "-n", "1", *check_cmd, f"{good}:allreduce", "--mpi", "--examples", "2", ":"]
        cmd += ["-n", "1", *check_cmd, *bad]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2, done.stdout + done.stderr
        assert "another rank's command line failed" in done.stderr
