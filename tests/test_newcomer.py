"""The newcomer's path: BLAS threads per rank, tutorials as scripts and notebooks, cluster scripts."""

import subprocess
import sys
from pathlib import Path

import pytest

from minidl.tools import threads, tutorial

ROOT = Path(__file__).resolve().parents[1]


def test_ranks_on_this_node_reads_each_launcher():
    assert threads.ranks_on_this_node({}) == 1
    assert threads.ranks_on_this_node({"MPI_LOCALNRANKS": "4"}) == 4  # MPICH (Hydra)
    assert threads.ranks_on_this_node({"OMPI_COMM_WORLD_LOCAL_SIZE": "3"}) == 3  # Open MPI
    assert threads.ranks_on_this_node({"SLURM_NTASKS_PER_NODE": "2(x4)"}) == 2  # srun


def test_limit_blas_threads_respects_the_users_choice(capsys):
    assert threads.limit_blas_threads({"MPI_LOCALNRANKS": "2", "OMP_NUM_THREADS": "1"}) is None
    assert threads.limit_blas_threads({}) is None  # one rank: leave BLAS alone
    assert capsys.readouterr().err == ""


def test_limit_blas_threads_warns_when_ranks_times_threads_exceed_cores(capsys):
    threads.limit_blas_threads({"MPI_LOCALNRANKS": "64", "OMP_NUM_THREADS": "64"})
    assert "64 ranks x 64 threads" in capsys.readouterr().err


def test_limit_blas_threads_sets_one_thread_when_ranks_share_a_node(capsys):
    threadpoolctl = pytest.importorskip("threadpoolctl")
    before = threadpoolctl.threadpool_info()
    try:
        assert threads.limit_blas_threads({"MPI_LOCALNRANKS": "2", "PMI_RANK": "0"}) == 1
        assert "one BLAS thread per rank" in capsys.readouterr().out
        assert all(pool["num_threads"] == 1 for pool in threadpoolctl.threadpool_info() if pool["user_api"] == "blas")
    finally:
        for pool in before:
            threadpoolctl.threadpool_limits(pool["num_threads"], user_api=pool["user_api"])


def test_need_ranks_outside_a_notebook_names_the_command():
    assert tutorial.need_ranks(2, "05_data_parallel.py", comm_size=2)
    with pytest.raises(SystemExit, match=r"mpiexec -n 3 python tutorials/07"):
        tutorial.need_ranks(3, "07_parameter_server_and_async.py", comm_size=1)


def test_no_tutorial_uses_its_own_file_path():
    for script in sorted((ROOT / "tutorials").glob("[0-9][0-9]_*.py")):
        assert "__file__" not in script.read_text().replace("collectives.__file__", ""), script.name


def training_command(script: str) -> list[str]:
    """The flags after ``python -m minidl.train`` in a batch script, its shell variables given sample values."""
    text = (ROOT / script).read_text().replace("\\\n", " ")
    line = next(line for line in text.splitlines() if "python -m minidl.train" in line)
    flags = line.split("python -m minidl.train", 1)[1]
    for variable, value in {
        '"${DATA_FLAGS[@]}"': "",
        "$SLURM_JOB_ID": "123",
        "${PBS_JOBID:-0}": "123",
    }.items():
        flags = flags.replace(variable, value)
    return flags.replace('"', "").split()


@pytest.mark.parametrize("script", ["examples/slurm/train_lm.sbatch", "examples/pbs/train_lm.pbs"])
def test_cluster_scripts_parse_and_their_flags_are_accepted(script, tmp_path):
    subprocess.run(["bash", "-n", str(ROOT / script)], check=True)
    flags = training_command(script)
    assert flags[:3] == ["lm", "--parallel", "data"]
    done = subprocess.run(
        [sys.executable, "-m", "minidl.train", *flags, "--print-config"], capture_output=True, text=True, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert '"preset": "small"' in done.stdout


def test_train_entry_point_prints_usage_without_a_program():
    done = subprocess.run([sys.executable, "-m", "minidl.train"], capture_output=True, text=True, cwd=ROOT)
    assert done.returncode == 2 and "usage: python -m minidl.train" in done.stderr
