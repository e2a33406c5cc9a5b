"""python -m minidl.train's mistakes that gave a traceback (issue 32, part 4): --seed -1, --resume with another
model (another program's, another size), a global batch resumed on ranks it does not divide over,
MINIDL_COMM_TIMEOUT=abc; and --global-batch's own checks. Each is one line naming the flag, exit 2, nothing trained."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from minidl.train.__main__ import main
from minidl.train.checks import UsageError, check_args

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
QUICK = ["--quick", "--dtype", "float64", "--log-every", "1000", "--max-steps", "2"]


def refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one error line of a run that must stop before training."""
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert "step" not in out and "Traceback" not in err, out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def test_a_negative_seed_is_one_line(capsys):
    line = refused(["lm", *QUICK, "--seed", "-1"], capsys)
    assert line.startswith("python -m minidl.train: error: --seed must be an integer >= 0") and "got -1" in line


@pytest.fixture(scope="module")
def lm_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("ckpt") / "lm.npz"
    main(["lm", *QUICK, "--hidden-size", "16", "--save", str(path)])
    return path


def test_resume_with_another_program_names_the_program(lm_checkpoint, capsys):
    capsys.readouterr()
    line = refused(["cnn", *QUICK, "--resume", str(lm_checkpoint)], capsys)
    assert line == (
        f"python -m minidl.train: error: --resume {lm_checkpoint}: the checkpoint holds a model of "
        "python -m minidl.train lm, not of python -m minidl.train cnn"
    )


def test_resume_with_another_model_size_names_the_flag_to_give(lm_checkpoint, capsys):
    capsys.readouterr()
    line = refused(["lm", *QUICK, "--hidden-size", "8", "--resume", str(lm_checkpoint)], capsys)
    assert line.endswith(
        "the checkpoint holds another model (hidden_size 16 there, 8 here); resume with the flags it was written "
        "with: --hidden-size 16"
    )


def test_a_checkpoint_without_the_program_name_is_still_told_apart(lm_checkpoint):
    """Checkpoints written before the program was recorded: the model's settings tell the programs apart."""
    from minidl.distributed.strategy import another_model
    from minidl.train.cnn import CNNTask

    cnn = SimpleNamespace(name="cnn", MODEL_FIELDS=CNNTask.MODEL_FIELDS, OVERRIDES=CNNTask.OVERRIDES, cfg=None)
    saved = {"config": {"hidden_size": 16, "num_layers": 1, "vocab_size": 755}}  # an lm checkpoint's settings
    message = another_model("old.npz", saved, cnn, KeyError("missing keys"))
    assert (
        message
        == "--resume old.npz: the checkpoint holds a model of another program, not of python -m minidl.train cnn"
    )


def test_global_batch_and_batch_size_are_one_or_the_other(capsys):
    line = refused(["lm", *QUICK, "--global-batch", "10", "--batch-size", "5"], capsys)
    assert (
        line
        == "python -m minidl.train: error: --global-batch and --batch-size: give one (--global-batch N is N / ranks per rank)"
    )


def test_global_batch_applies_where_the_global_batch_is_batch_times_ranks(capsys):
    line = refused(["lm", *QUICK, "--global-batch", "10", "--parallel", "pipeline"], capsys)
    assert "--global-batch applies only to --parallel none/data/zero" in line


def test_global_batch_on_one_process_is_its_batch(capsys):
    assert main(["lm", *QUICK, "--global-batch", "6"]) == 0
    assert "B=6 streams/rank" in capsys.readouterr().out


@pytest.mark.parametrize("value", ["abc", "-3", "inf"])
def test_a_bad_comm_timeout_is_a_usage_error_of_a_parallel_run(monkeypatch, value):
    monkeypatch.setenv("MINIDL_COMM_TIMEOUT", value)
    args = argparse.Namespace(parallel="data")
    with pytest.raises(UsageError, match=f"MINIDL_COMM_TIMEOUT='{value}': expected"):
        check_args(args)
    check_args(argparse.Namespace(parallel="none"))  # one process has no communication to time out


@pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
def test_comm_timeout_abc_and_a_global_batch_resumed_on_3_ranks_are_one_line_under_mpiexec(lm_checkpoint):
    """A checkpoint with global batch 10 (one process) resumed on 3 ranks: was a ValueError traceback per rank and
    MPI_Abort; MINIDL_COMM_TIMEOUT=abc: a traceback from dist.init."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    train = [sys.executable, "-m", "minidl.train", "lm", *QUICK, "--hidden-size", "16", "--parallel", "data"]
    runs = {
        "resume": (["-n", "3", *train, "--resume", str(lm_checkpoint)], env),
        "timeout": (["-n", "2", *train], {**env, "MINIDL_COMM_TIMEOUT": "abc"}),
    }
    for what, (args, e) in runs.items():
        proc = subprocess.run([MPIEXEC, *args], capture_output=True, text=True, timeout=180, env=e, cwd=ROOT)
        errors = [line for line in proc.stderr.splitlines() if "error:" in line]
        assert proc.returncode == 2 and len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr
        if what == "resume":
            assert errors[0].endswith(
                "the checkpoint's global batch of 10 (1 ranks) cannot be split into 3 equal per-rank batches; "
                "resume on 1, 2, 5, 10 ranks"
            ), errors
        else:
            assert (
                errors[0]
                == "[rank 0 of 2] python -m minidl.train: error: MINIDL_COMM_TIMEOUT='abc': expected a number of seconds (or 0/off)"
            )
