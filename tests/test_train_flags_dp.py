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
        (["--sparse-embedding"], "--sparse-embedding applies only to --parallel data"),
        (["cnn", "--parallel", "data", "--sparse-embedding"], "--sparse-embedding applies only to the language model"),
        (["--parallel", "data", "--sparse-embedding", "--compression", "fp16"], "does not combine with --compression"),
        (["--timeline", "t.json"], "--timeline applies only to --parallel data/zero"),
        (["--parallel", "zero", "--zero-stage", "4"], "invalid choice: 4"),
    ],
)
def test_flags_of_another_mode_are_one_line_errors(flags, message):
    task = "cnn" if flags[0] == "cnn" else "lm"
    done = subprocess.run(
        [sys.executable, "-m", "minidl.train", task, "--quick", *flags[task == "cnn" :]],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2
    assert message in done.stderr and "Traceback" not in done.stderr


def test_loss_scale_without_reduced_precision_is_refused():
    done = subprocess.run(
        [sys.executable, "-m", "minidl.train", "lm", "--quick", "--loss-scale", "dynamic"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert done.returncode == 2 and "--loss-scale needs --precision fp16 or bf16" in done.stderr


def test_fp16_with_dynamic_scaling_and_bf16_train_like_fp32():
    from minidl.train import lm

    flags = ["--quick", "--max-steps", "150", "--log-every", "1000"]
    ppl = {p: lm.main(flags + ["--precision", p])["test_ppl"] for p in ("fp32", "fp16", "bf16")}
    for p in ("fp16", "bf16"):
        assert abs(ppl[p] / ppl["fp32"] - 1) < 0.05, ppl
