"""``python -m collectives.bench`` (issue 26): defaults from the machine (sizes, a time budget) printed as a plan,
and Ctrl-C under mpiexec ends it after the repeat in progress, with the rows so far and exit status 130."""

from __future__ import annotations

import sys

import pytest
from helpers.signals import MPIEXEC, interrupt

from collectives.bench import human
from collectives.bench_plan import describe, machine_sizes

GIB = 1 << 30


def test_sizes_stop_at_1m_when_ranks_outnumber_cores():
    assert [human(n) for n in machine_sizes(4, 2, 8 * GIB)] == ["1K", "4K", "16K", "64K", "256K", "1M"]
    assert human(machine_sizes(4, 8, 8 * GIB)[-1]) == "64M"
    assert human(machine_sizes(4, 8, 256 << 20)[-1]) == "4M"  # at most 1/16 of the free memory per rank


def test_the_plan_says_sizes_and_time():
    line = describe(4, 2, machine_sizes(4, 2, 8 * GIB), 60.0, human)
    assert "4 ranks on 2 cores (more ranks than cores" in line and "6 sizes 1K..1M" in line
    assert "about 10 s" in line and "about 60 s in all" in line and "Ctrl-C" in line


@pytest.mark.skipif(MPIEXEC is None, reason="needs mpiexec")
def test_ctrl_c_under_mpiexec_stops_the_benchmark(tmp_path):
    command = [MPIEXEC, "-n", "2", sys.executable, "-m", "collectives.bench", "--no-calibrate", "--algorithms"]
    command += ["ring,tree", "--sizes", "1K,4K,16K,64K", "--repeats", "100000", "--budget", "3000"]
    code, out = interrupt(command, tmp_path, after="# plan:", timeout=90)
    assert code == 130, out
    assert "# interrupted (Ctrl-C):" in out and "Traceback" not in out, out


def test_an_unknown_algorithm_is_one_line_before_any_message(capsys):
    """--algorithms mpi is accepted (its row is always there); a misspelt name is a usage error naming it."""
    from collectives.bench import main

    with pytest.raises(SystemExit) as stop:
        main(["--algorithms", "ring,rign", "--sizes", "8"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--algorithms: unknown 'rign': expected mpi or auto, " in err


@pytest.mark.parametrize(
    "argv, problem",
    [
        (["--sizes", "garbage"], "--sizes 'garbage': expected bytes per rank"),
        (["--sizes", "1K,nan"], "--sizes '1K,nan': expected bytes per rank"),
        (["--sizes", "6"], "--sizes '6': each size must be a positive multiple of 4 bytes"),
        (["--repeats", "-2"], "--repeats -2: must be >= 1"),
        (["--budget", "nan"], "--budget nan: must be a finite number of seconds > 0"),
        (["--budget", "-1"], "--budget -1.0: must be a finite number"),
        (["--dtype", "object"], "--dtype 'object': expected one of float32, float64"),
        (["--plot", "/dev/full"], "--plot /dev/full: cannot be written (No space left on device)"),
        (["--sizes", "1T"], "--sizes '1T': expected bytes per rank"),
    ],
)
def test_a_bad_flag_is_one_line_before_any_message(capsys, argv, problem):
    """Issue 32: each was a traceback (or, --budget nan, accepted); --plot unwritable failed after the run."""
    from collectives.bench import main

    with pytest.raises(SystemExit) as stop:
        main(["--no-calibrate", "--algorithms", "ring", *argv])
    out, err = capsys.readouterr()
    assert stop.value.code == 2 and len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"python -m collectives.bench: error: {problem}"), err
    assert "# plan" not in out


def test_sizes_that_do_not_fit_in_memory_are_refused_naming_sizes(capsys, monkeypatch):
    """mpiexec -n 2 ... --sizes 4G was ended by the kernel's OOM killer; now one line before any message."""
    from collectives import bench

    monkeypatch.setattr(bench, "free_memory", lambda: 1 << 30)
    with pytest.raises(SystemExit) as stop:
        bench.main(["--no-calibrate", "--algorithms", "ring,tree", "--sizes", "1K,256M"])
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and err.startswith("python -m collectives.bench: error: --sizes: 256M per rank"), err
    assert "1 ranks x 7 arrays" in err and "more than the 1.0 GiB available" in err, err


def test_the_plot_folder_is_made(tmp_path):
    from collectives.bench import main

    path = tmp_path / "new" / "deeper" / "bench.png"
    rows = main(["--no-calibrate", "--algorithms", "ring", "--sizes", "1K", "--repeats", "3", "--plot", str(path)])
    assert rows and path.is_file()
