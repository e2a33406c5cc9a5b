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


def test_resume_at_another_size_accumulates_passes(tmp_path):
    """--batch-size b' with Q*b' < the checkpoint's global batch G: each step runs G/(Q*b') accumulated passes (a
    carried LSTM state per pass) and ends where the uninterrupted run ends; a checkpoint the accumulating run writes
    (its passes' states joined) resumes at P again and still ends there."""
    for p, q, batch, per_pass in ((4, 2, 5, 5), (2, 3, 6, 2), (3, 1, 4, 4)):
        full = tmp_path / f"full{p}.npz"
        train(p, "--batch-size", str(batch), "--max-steps", "12", "--save", str(full), "--save-every", "4")
        mid = tmp_path / f"mid{p}{q}.npz"
        resume = ["--resume", str(tmp_path / f"full{p}.step00000004.npz")]
        out = train(q, "--batch-size", str(per_pass), "--max-steps", "8", "--save", str(mid), *resume)
        passes = p * batch // (q * per_pass)
        assert f"{p * batch // q} per rank, as {passes} accumulated passes of {per_pass}, keeps" in out
        back = tmp_path / f"back{p}{q}.npz"
        train(p, "--batch-size", str(batch), "--max-steps", "12", "--save", str(back), "--resume", str(mid))
        a, b = params(full), params(back)
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


def test_cnn_resume_accumulating_is_bitwise(tmp_path):
    """The CNN at 2 -> 1 with its per-rank batch kept: pass k is saved rank k's examples, batch norm normalizes
    over the same groups and updates its running statistics on pass 0 only, so rank 0's model is bitwise the same."""
    cnn = ["-m", "minidl.train", "cnn", "--quick", "--dtype", "float64", "--log-every", "1000", "--batch-size", "4"]
    full, resumed = tmp_path / "full.npz", tmp_path / "res.npz"
    proc = call(
        [MPIEXEC, "-n", "2", sys.executable, *cnn, "--parallel", "data", "--max-steps", "8", "--save", str(full)]
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    call(
        [MPIEXEC, "-n", "2", sys.executable, *cnn, "--parallel", "data", "--max-steps", "4", "--save", str(full) + "4"]
    )
    proc = call([sys.executable, *cnn, "--max-steps", "8", "--save", str(resumed), "--resume", str(full) + "4"])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "8 per rank, as 2 accumulated passes of 4, keeps the global batch 8" in proc.stdout
    a, b = params(full), params(resumed)
    assert all(np.array_equal(a[k], b[k]) for k in a), [k for k in a if not np.array_equal(a[k], b[k])]


def test_accumulating_resume_refusals(tmp_path):
    train(2, "--batch-size", "5", "--max-steps", "4", "--save", str(tmp_path / "a.npz"))
    for flags, message in (
        (["--batch-size", "3"], "global batch of 10 (2 ranks) cannot be split into 1 equal per-rank batches of "),
        (["--batch-size", "5", "--overlap"], "2 accumulated passes per step with --overlap"),
    ):
        mode = ["--parallel", "data"] if "--overlap" in flags else []
        proc = call([sys.executable, *TRAIN, *mode, "--max-steps", "8", "--resume", str(tmp_path / "a.npz"), *flags])
        assert proc.returncode != 0 and message in proc.stdout + proc.stderr, proc.stdout + proc.stderr


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


def test_launcher_under_slurm_runs_srun_on_the_allocation(tmp_path):
    """Inside an allocation (SLURM_JOB_ID set, srun on PATH) the launcher starts each attempt with srun over the
    allocation's nodes; a stand-in srun logs its arguments and runs the ranks under mpiexec."""
    log, srun = tmp_path / "srun.log", tmp_path / "bin" / "srun"
    srun.parent.mkdir()
    srun.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> {log}\n'
        'for a in "$@"; do case $a in --ntasks=*) n=${a#--ntasks=}; shift;; --*) shift;; *) break;; esac; done\n'
        f'exec {MPIEXEC} -n "$n" "$@"\n'
    )
    srun.chmod(0o755)
    env = {**ENV, "SLURM_JOB_ID": "7", "SLURM_NNODES": "2", "PATH": f"{srun.parent}{os.pathsep}{ENV['PATH']}"}
    save = tmp_path / "lm.npz"
    command = [sys.executable, "-m", "minidl.launch", "-n", "3", "--min-ranks", "2", "--", sys.executable, *TRAIN]
    command += ["--parallel", "data", "--max-steps", "30", "--save", str(save), "--save-every", "10"]
    proc = subprocess.run(
        [*command, "--inject-failure", "2:25"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = [line.split()[:3] for line in log.read_text().splitlines()]
    assert calls == [
        ["--nodes=2", "--ntasks=3", "--kill-on-bad-exit=1"],
        ["--nodes=2", "--ntasks=2", "--kill-on-bad-exit=1"],
    ], calls
    assert "minidl.launch: restart 1/3 on 2 ranks from" in proc.stdout and "test perplexity" in proc.stdout
