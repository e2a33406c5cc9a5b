"""Elastic training under mpiexec (subprocesses): resume at another rank count, and the launcher's restart.

- a checkpoint of P ranks resumed at Q ranks (4 -> 2, 2 -> 3, 3 -> 1) ends where the uninterrupted P-rank run
  ends: the same global batch and data order, only the reduction order differs (float64, to 1e-12);
- ``minidl.launch -n 3 --min-ranks 2`` with a rank killed at step 50 restarts once, on 2 ranks, from the step-40
  checkpoint, and ends bitwise where that resume by hand ends; with ``--min-ranks 3`` where the 3-rank run ends.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl

ROOT = Path(__file__).resolve().parents[1]
MPIEXEC = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
pytestmark = pytest.mark.skipif(MPIEXEC is None, reason="mpiexec not found")
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
ENV["PYTHONPATH"] = os.pathsep.join([str(ROOT), ENV.get("PYTHONPATH", "")])
TRAIN = ["-m", "minidl.train", "lm", "--quick", "--dtype", "float64", "--log-every", "1000"]


def call(command: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(command, cwd=ROOT, env=ENV, capture_output=True, text=True, timeout=300)


def train(ranks: int, *flags: str) -> str:
    mode = ["--parallel", "data"] if ranks > 1 else ["--parallel", "none"]
    command = [MPIEXEC, "-n", str(ranks), sys.executable] if ranks > 1 else [sys.executable]
    proc = call([*command, *TRAIN, *mode, *flags])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def params(path: Path) -> dict[str, np.ndarray]:
    return minidl.load(str(path))["model"]


def test_checkpoint_resumes_at_another_size(tmp_path):
    """4 -> 2, 2 -> 3 and 3 -> 1: the resumed run equals the uninterrupted one (the --save-every run itself)."""
    for p, q, batch in ((4, 2, 5), (2, 3, 6), (3, 1, 4)):
        full, resumed = tmp_path / f"full{p}.npz", tmp_path / f"res{p}{q}.npz"
        train(p, "--batch-size", str(batch), "--max-steps", "12", "--save", str(full), "--save-every", "6")
        out = train(
            q, "--max-steps", "12", "--save", str(resumed), "--resume", str(tmp_path / f"full{p}.step00000006.npz")
        )
        assert f"resuming a {p}-rank checkpoint at {q} ranks: {p * batch // q} per rank" in out
        a, b = params(full), params(resumed)
        worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
        assert worst <= 1e-12, (p, q, worst)


def test_resize_that_cannot_split_the_batch_is_refused(tmp_path):
    train(2, "--batch-size", "5", "--max-steps", "4", "--save", str(tmp_path / "a.npz"), "--save-every", "4")
    proc = call(
        [MPIEXEC, "-n", "3", sys.executable, *TRAIN, "--parallel", "data", "--max-steps", "8", "--resume"]
        + [str(tmp_path / "a.step00000004.npz")]
    )
    assert proc.returncode != 0
    assert "global batch of 10 (2 ranks) cannot be split into 3 equal per-rank batches" in proc.stdout + proc.stderr


def launch(min_ranks: int, save: Path) -> str:
    command = [sys.executable, "-m", "minidl.launch", "-n", "3", "--min-ranks", str(min_ranks), "--"]
    command += [sys.executable, *TRAIN, "--parallel", "data", "--max-steps", "60", "--save", str(save)]
    proc = call([*command, "--save-every", "20", "--inject-failure", "1:50"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    restarts = re.findall(r"minidl.launch: restart (\d)/3 on (\d) ranks from (\S+);", proc.stdout)
    assert restarts == [("1", str(min_ranks), str(save.with_suffix("")) + ".step00000040.npz")], proc.stdout
    assert "--inject-failure: exiting abruptly at step 50" in proc.stderr
    return proc.stdout


def perplexity(out: str) -> str:
    return re.search(r"test perplexity (\S+)", out.split("minidl.launch: restart")[-1]).group(1)


def test_launcher_restarts_a_killed_rank_on_fewer_ranks(tmp_path):
    save = tmp_path / "lm.npz"
    out = launch(2, save)
    by_hand = train(
        2, "--max-steps", "60", "--save", str(tmp_path / "hand.npz"), "--resume", str(tmp_path / "lm.step00000040.npz")
    )
    assert perplexity(out) == perplexity(by_hand)
    a, b = params(save), params(tmp_path / "hand.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a)


def test_launcher_restarts_on_as_many_ranks(tmp_path):
    save = tmp_path / "lm.npz"
    out = launch(3, save)
    whole = train(3, "--max-steps", "60", "--save", str(tmp_path / "whole.npz"))
    assert perplexity(out) == perplexity(whole)
    a, b = params(save), params(tmp_path / "whole.npz")
    assert all(np.array_equal(a[k], b[k]) for k in a)
