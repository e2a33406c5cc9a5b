"""What a training run writes, and whose it is (issue 32): folders made, outputs checked before the first step,
a log appended to by a resumed run and never written over another file, one job per --save (a lock), checkpoints
that carry their run's id (--keep and the launcher take only their own), hand-edited checkpoints named by field,
and a full disk in one line."""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import subprocess
import sys

import numpy as np
import pytest

import minidl
from minidl.distributed import checkpoint_schedule as checkpoints
from minidl.tools import launch
from minidl.train import lm

LM = ["--quick", "--dtype", "float64", "--log-every", "1"]


def refused(capsys, pattern: str, argv: list[str]) -> str:
    """The run stops before its first step with one line (exit 2) matching ``pattern``."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        lm.main(argv)
    out, err = capsys.readouterr()
    assert exit_.value.code == 2 and len(err.strip().splitlines()) == 1 and re.search(pattern, err), err
    assert "step 1/" not in out and "Traceback" not in err, out
    return err


def records(path) -> list[dict]:
    return [json.loads(line) for line in open(path)]


def test_the_folders_of_log_and_checkpoint_are_made(tmp_path):
    log, save = tmp_path / "runs" / "deep" / "lm.jsonl", tmp_path / "ckpt" / "lm.npz"
    lm.main([*LM, "--max-steps", "2", "--log-json", str(log), "--save", str(save)])
    assert [r["step"] for r in records(log) if r["kind"] == "train"] == [1, 2] and save.is_file()
    assert not os.path.exists(checkpoints.lock_path(str(save)))  # given back at the end


@pytest.mark.parametrize("where", ["folder", "devfull", "readonly"])
def test_an_output_that_cannot_be_written_is_one_line_before_training(tmp_path, capsys, where):
    if where == "folder":
        path, pattern = tmp_path, "is a folder"
    elif where == "devfull":
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full on this system")
        path, pattern = "/dev/full", r"cannot be written \(No space left on device\)"
    else:
        if os.geteuid() == 0:
            pytest.skip("root writes anywhere")
        (tmp_path / "ro").mkdir()
        (tmp_path / "ro").chmod(0o500)
        path, pattern = tmp_path / "ro" / "lm.jsonl", "is not writable"
    try:
        refused(
            capsys, f"--log-json {re.escape(str(path))}: {pattern}", [*LM, "--max-steps", "2", "--log-json", str(path)]
        )
    finally:
        if where == "readonly":
            (tmp_path / "ro").chmod(0o700)


def test_a_resumed_run_appends_to_its_log(tmp_path):
    log, save = tmp_path / "lm.jsonl", str(tmp_path / "lm.npz")
    lm.main([*LM, "--max-steps", "3", "--log-json", str(log), "--save", save])
    lm.main([*LM, "--max-steps", "5", "--log-json", str(log), "--resume", save])
    assert [r["step"] for r in records(log) if r["kind"] == "train"] == [1, 2, 3, 4, 5]  # was [4, 5]
    lm.main([*LM, "--max-steps", "1", "--log-json", str(log)])  # a fresh run starts its log anew
    assert [r["step"] for r in records(log) if r["kind"] == "train"] == [1]


def test_a_log_is_never_written_over_a_checkpoint(tmp_path, capsys):
    save = tmp_path / "lm.npz"
    lm.main([*LM, "--max-steps", "1", "--save", str(save)])
    before = save.read_bytes()
    refused(capsys, "--log-json .*lm.npz: the file exists and is not a log", [*LM, "--log-json", str(save)])
    assert save.read_bytes() == before


def test_a_second_job_on_the_same_save_is_refused_and_a_dead_ones_lock_taken_over(tmp_path, capsys):
    save = str(tmp_path / "lm.npz")
    lock = checkpoints.lock_path(save)
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        with open(lock, "w") as f:
            f.write(f"{live.pid} {socket.gethostname()}\n")
        refused(
            capsys,
            f"--save .*another job \\(pid {live.pid} on .*\\) is writing checkpoints there",
            [*LM, "--save", save],
        )
        assert not os.path.exists(save)
    finally:
        live.kill()
        live.wait()
    # the owner is dead now (the same pid, reaped): its lock is stale and taken over
    lm.main([*LM, "--max-steps", "1", "--save", save])
    assert os.path.isfile(save) and not os.path.exists(lock)


def test_keep_and_the_launcher_take_only_their_own_runs_checkpoints(tmp_path, capsys):
    save = str(tmp_path / "lm.npz")
    lm.main([*LM, "--seed", "1", "--max-steps", "4", "--save", save, "--save-every", "4", "--keep", "1"])
    old = checkpoints.scheduled_path(save, 4)
    old_run = checkpoints.run_of(old)
    lm.main([*LM, "--seed", "2", "--max-steps", "2", "--save", save, "--save-every", "2", "--keep", "1"])
    assert "1 scheduled checkpoint of another run beside it" in capsys.readouterr().out
    new = checkpoints.scheduled_path(save, 2)
    assert os.path.isfile(old) and os.path.isfile(new)  # --keep 1 pruned the new run's own step 2 before
    assert old_run and checkpoints.run_of(new) not in (None, old_run)
    assert launch.newest_intact(save, checkpoints.run_of(new)) == new  # not the old run's step 4
    assert launch.newest_intact(save) == old


def test_a_resume_of_another_run_is_refused(tmp_path, capsys, monkeypatch):
    save = str(tmp_path / "lm.npz")
    lm.main([*LM, "--max-steps", "1", "--save", save])
    monkeypatch.setenv(checkpoints.RUN_ID_VARIABLE, "another0run")
    refused(
        capsys, "a checkpoint of run .*, and this job is run another0run", [*LM, "--max-steps", "2", "--resume", save]
    )


def edited(tmp_path, save: str, change) -> str:
    ckpt = minidl.load(save)
    change(ckpt)
    path = str(tmp_path / "edited.npz")
    minidl.save(ckpt, path)
    return path


@pytest.mark.parametrize(
    "change, pattern",
    [
        (lambda c: c["state"].update(step=-5), r"field state/step = -5 is not an integer >= 0"),
        (lambda c: c["state"].update(step=10**9), r"field state/step = 1000000000 does not match epoch 1, window 2"),
        (lambda c: c["state"].update(epoch=0), r"field state/epoch = 0 is not in 1\.\."),
        (lambda c: c["state"].update(window=10**6), r"field state/window = 1000000 is past the \d+ steps"),
        (lambda c: c.update(world_size=3), r"field world_size = 3 does not match its 1 per-rank states"),
        (lambda c: c["ranks"][0].update(rng="{}"), r"field ranks/0/rng is not a random generator's state"),
    ],
)
def test_a_hand_edited_checkpoint_is_one_line_naming_the_field(tmp_path, capsys, change, pattern):
    save = str(tmp_path / "lm.npz")
    lm.main([*LM, "--max-steps", "2", "--save", save])
    refused(capsys, pattern, [*LM, "--max-steps", "4", "--resume", edited(tmp_path, save, change)])


def test_a_checkpoint_at_an_epochs_last_step_resumes(tmp_path):
    """--save-every (or Ctrl-C) at an epoch's last step saves window = steps per epoch: a position a run reaches."""
    save = str(tmp_path / "lm.npz")
    lm.main([*LM, "--max-steps", "199", "--save", save, "--save-every", "199"])
    last = checkpoints.scheduled_path(save, 199)
    assert minidl.load(last)["state"]["window"] == 199  # the quick preset's 199 steps an epoch
    resumed = lm.main([*LM, "--max-steps", "200", "--resume", last])
    assert resumed["steps"] == 200


def test_a_checkpoint_on_a_full_disk_is_one_line_and_the_older_ones_stay(tmp_path, capsys, monkeypatch):
    save = str(tmp_path / "lm.npz")
    real, calls = os.fsync, []

    def fsync(fd: int) -> None:  # the second checkpoint's write finds the disk full
        calls.append(fd)
        if len(calls) >= 2:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        real(fd)

    monkeypatch.setattr("minidl.serialization.os.fsync", fsync)
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        lm.main([*LM, "--max-steps", "4", "--save", save, "--save-every", "2", "--keep", "5"])
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 1 and len(err.splitlines()) == 1 and "No space left on device" in err, err
    assert "step00000004" in err and "the checkpoints written before it are intact" in err, err
    first = checkpoints.scheduled_path(save, 2)
    assert [p for _, p in checkpoints.scheduled(save)] == [first] and minidl.load(first)["state"]["step"] == 2
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".tmp-")]
    assert np.isfinite(minidl.load(first)["state"]["examples"])
