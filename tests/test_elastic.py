"""Scheduled checkpoints (``--save-every``, ``--keep``), ``--inject-failure`` and the launcher's checks (serial)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import minidl
from minidl.distributed import checkpoint_schedule as checkpoints
from minidl.tools import launch
from minidl.train import lm

ROOT = Path(__file__).resolve().parents[1]
QUICK = ["--quick", "--dtype", "float64", "--log-every", "1000"]


def test_scheduled_paths_latest_and_prune(tmp_path):
    save = str(tmp_path / "run.npz")
    assert checkpoints.latest(save) is None
    for step in (5, 40, 10, 200):
        Path(checkpoints.scheduled_path(save, step)).write_bytes(b"x")
    (tmp_path / "run.step12.npz").write_bytes(b"not ours")
    (tmp_path / "other.step00000300.npz").write_bytes(b"not ours")
    assert checkpoints.latest(save) == str(tmp_path / "run.step00000200.npz")
    gone = checkpoints.prune(save, 2)
    assert [os.path.basename(p) for p in gone] == ["run.step00000005.npz", "run.step00000010.npz"]
    assert [s for s, _ in checkpoints.scheduled(save)] == [40, 200]


def test_save_every_keeps_the_newest_and_resumes_bitwise(tmp_path):
    save = str(tmp_path / "lm.npz")
    full = lm.main([*QUICK, "--max-steps", "14", "--save", save, "--save-every", "4", "--keep", "2"])
    assert [s for s, _ in checkpoints.scheduled(save)] == [8, 12]
    state = minidl.load(checkpoints.scheduled_path(save, 8))["state"]
    assert (state["step"], state["window"], state["examples"]) == (8, 8, 8 * 10)
    resumed = lm.main([*QUICK, "--max-steps", "14", "--resume", checkpoints.scheduled_path(save, 8)])
    assert all(np.array_equal(full["params"][k], resumed["params"][k]) for k in full["params"])
    assert resumed["test_ppl"] == full["test_ppl"]


def test_save_every_needs_save(capsys):
    with pytest.raises(SystemExit) as e:
        lm.main([*QUICK, "--save-every", "3"])
    assert e.value.code == 2
    assert "--save-every needs --save" in capsys.readouterr().err


def test_inject_failure_exits_abruptly_once(tmp_path):
    save = str(tmp_path / "lm.npz")
    command = [sys.executable, "-m", "minidl.train", "lm", *QUICK, "--max-steps", "6", "--save", save]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first = subprocess.run([*command, "--inject-failure", "0:3"], env=env, capture_output=True, text=True)
    assert first.returncode == 1 and "exiting abruptly at step 3" in first.stderr
    assert "test perplexity" not in first.stdout and os.path.exists(checkpoints.failure_marker(save))
    again = subprocess.run([*command, "--inject-failure", "0:3"], env=env, capture_output=True, text=True)
    assert again.returncode == 0 and "test perplexity" in again.stdout


@pytest.mark.parametrize("flag", ["1", "a:3", "-1:3", "0:0"])
def test_inject_failure_needs_rank_and_step(flag, capsys):
    with pytest.raises(SystemExit):
        lm.main([*QUICK, "--inject-failure", flag])
    assert "--inject-failure" in capsys.readouterr().err


def launch_error(argv: list[str], capsys) -> str:
    assert launch.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0, err
    return err


def test_launcher_refuses_bad_input(tmp_path, capsys):
    train = [sys.executable, "-m", "minidl.train", "lm", *QUICK]
    assert "--min-ranks 3 is above -n 2" in launch_error(["-n", "2", "--min-ranks", "3", "--", *train], capsys)
    assert "give the command after --" in launch_error(["-n", "2"], capsys)
    (tmp_path / "a-file").write_text("")
    bad = ["-n", "1", "--", *train, "--save", str(tmp_path / "a-file" / "lm.npz")]
    assert "does not exist or is not writable" in launch_error(bad, capsys)


def test_launcher_refuses_a_checkpoint_of_another_model(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    save = str(tmp_path / "lm.npz")
    lm.main([*QUICK, "--hidden-size", "16", "--max-steps", "2", "--save", save, "--save-every", "2"])
    capsys.readouterr()
    # another run's checkpoints beside --save are never resumed (issue 32); a --resume given is checked
    command = [sys.executable, "-m", "minidl.train", "lm", *QUICK, "--save", save]
    err = launch_error(["-n", "1", "--", *command, "--resume", checkpoints.scheduled_path(save, 2)], capsys)
    assert "is of another model: hidden_size = 16, the command has 64" in err


def test_launcher_gives_up_after_max_restarts(tmp_path, capsys):
    script = tmp_path / "fail.py"
    script.write_text("import sys\nprint('ValueError: always broken', file=sys.stderr)\nsys.exit(3)\n")
    assert launch.main(["-n", "1", "--max-restarts", "2", "--", sys.executable, str(script)]) == 3
    out, err = capsys.readouterr()
    assert out.count("restart ") == 2 and "restart 2/2 on 1 ranks from the start" in out
    assert "giving up after 2 restarts; last error: ValueError: always broken" in err


def test_with_resume_replaces_the_commands_resume():
    assert launch.with_resume(["x", "--resume", "a", "--lr=1"], "b") == ["x", "--lr=1", "--resume", "b"]
    assert launch.with_resume(["x", "--resume=a"], "b") == ["x", "--resume", "b"]
    assert launch.flag_value(["--save", "a", "--save=b"], "--save") == "b"
