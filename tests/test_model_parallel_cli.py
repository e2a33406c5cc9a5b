"""``python -m minidl.train lm|cnn --parallel model|tensor`` under mpiexec takes the same steps as the
serial program: the dense parameters it saves equal ``minidl.train.lm|cnn``'s (float64, 1e-8)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")
STEPS = "3"
COMMON = ["--quick", "--dtype", "float64", "--max-steps", STEPS, "--log-every", "1"]
RUNS = [  # program, mode, ranks, extra flags
    ("lm", "model", 3, ["--layers", "1"]),
    ("lm", "tensor", 2, []),
    ("cnn", "model", 3, []),
    ("cnn", "tensor", 2, []),
]

pytestmark = pytest.mark.skipif(not MPIEXEC.exists(), reason=f"no mpiexec beside {sys.executable}")


def serial_params(program: str, extra: list[str]) -> dict[str, np.ndarray]:
    previous = minidl.get_default_dtype()
    try:
        if program == "lm":
            from minidl.train.lm import main
        else:
            from minidl.train.cnn import main
        return main([*COMMON, *extra])["params"]
    finally:
        minidl.set_default_dtype(previous)


@pytest.mark.parametrize(("program", "mode", "ranks", "extra"), RUNS, ids=[f"{p}-{m}-{n}" for p, m, n, _ in RUNS])
def test_cli_run_equals_the_serial_program(tmp_path, program, mode, ranks, extra):
    path = tmp_path / "params.npz"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [
        str(MPIEXEC),
        "-n",
        str(ranks),
        sys.executable,
        "-m",
        "minidl.train",
        program,
        "--parallel",
        mode,
        *COMMON,
        *extra,
        "--save",
        str(path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"{mode} parallel over {ranks} ranks" in proc.stdout
    assert "bytes sent per step: rank 0" in proc.stdout
    saved = minidl.load(path)
    assert saved["steps"] == int(STEPS) and saved["parallel"] == mode
    want = serial_params(program, extra)
    got = saved["model"]
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=1e-8, atol=1e-8 * np.abs(want[k]).max(), err_msg=k)


def test_unsupported_flags_are_refused(tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    cmd = [
        sys.executable,
        "-m",
        "minidl.train",
        "lm",
        "--parallel",
        "tensor",
        "--quick",
        "--resume",
        str(tmp_path / "x.npz"),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert proc.returncode != 0
    assert "--resume applies only to --parallel none/data" in proc.stderr  # train/checks.py, before anything runs
