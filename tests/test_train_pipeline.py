"""The pipelined language-model program under mpiexec: the same parameters as the serial program.

``mpiexec -n P python -m minidl.train lm --parallel pipeline`` (a subprocess, with a timeout) trains a few steps in
float64 and saves the dense parameters; ``python -m minidl.train lm`` (in process) trains the same steps
on one process. 3 stages with 1F1B, and a 2 x 2 dp x pp grid with GPipe (2 pipelines of 5 streams =
the serial run's 10).
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl
from minidl.train import lm

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = Path(sys.executable).with_name("mpiexec")
COMMON = ["--quick", "--dtype", "float64", "--max-steps", "3"]


def run_pipelined(nprocs, flags, path):
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    cmd = [
        str(MPIEXEC),
        "-n",
        str(nprocs),
        sys.executable,
        "-m",
        "minidl.train",
        "lm",
        "--parallel",
        "pipeline",
        *COMMON,
        *flags,
        "--save",
        str(path),
    ]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    saved = minidl.load(str(path))  # the dense parameters, as --parallel model|tensor save them
    assert saved["parallel"] == "pipeline" and saved["steps"] == 3
    return proc.stdout, saved["model"]


@pytest.fixture(scope="module")
def serial():
    before = minidl.get_default_dtype()  # (a module fixture runs outside the per-test dtype restore)
    yield lm.main(COMMON)["params"]
    minidl.set_default_dtype(before)


@pytest.mark.skipif(not MPIEXEC.exists(), reason="mpiexec is not installed next to the Python executable")
@pytest.mark.parametrize(
    "nprocs, flags",
    [
        (3, ["--schedule", "1f1b", "--micro-batches", "3"]),
        (4, ["--schedule", "gpipe", "--micro-batches", "2", "--pipeline-stages", "2", "--batch-size", "5"]),
    ],
)
def test_pipelined_lm_program_matches_serial(tmp_path, serial, nprocs, flags):
    out, got = run_pipelined(nprocs, flags, tmp_path / "params.npz")
    assert "measured bubble" in out and "test perplexity" in out
    peaks = re.search(r"last training step .* micro-batches held per stage \(peak\): \[([\d, ]+)\]", out)
    assert peaks and min(int(p) for p in peaks.group(1).split(",")) >= 1, out  # from training, not evaluation
    assert set(got) == set(serial)
    for k, v in serial.items():
        np.testing.assert_allclose(got[k], v, rtol=1e-8, atol=1e-12, err_msg=k)
