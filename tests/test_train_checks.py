"""python -m minidl.train checks every flag before it builds anything: one line, exit 2 (issues 11 and 14)."""

from __future__ import annotations

import argparse
import os

import pytest

from minidl.train.checks import UsageError, check_args


def args(**kw):
    base = dict(text=None, parallel="none", lr=None, fusion_mb=64.0, allreduce="ring", compression="none")
    base.update(kw)
    return argparse.Namespace(**base)


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(lr=float("inf")), "--lr must be a finite number > 0, got inf"),
        (dict(lr=float("nan")), "--lr must be a finite number > 0"),
        (dict(fusion_mb=-1.0), "--fusion-mb must be a finite number >= 0, got -1.0"),
        (dict(dropout=1.0), r"--dropout must be in \[0, 1\)"),
        (dict(compression="fp16"), "--compression applies only to --parallel data .*, not to --parallel none"),
        (dict(parallel="data", servers=2), "--servers applies only to --parallel ps"),
        (dict(parallel="ps", average_every=8), "--average-every applies only to --parallel local-sgd"),
        (dict(parallel="data", schedule="gpipe"), "--schedule applies only to --parallel pipeline"),
        (dict(parallel="pipeline", sync_bn=True), "--sync-bn applies only to --parallel data"),
    ],
)
def test_bad_flags_are_named(kw, message):
    with pytest.raises(UsageError, match=message):
        check_args(args(**kw))


def test_flags_of_the_chosen_mode_pass():
    check_args(args(parallel="data", compression="fp16", fusion_mb=0.0, lr=0.5))
    check_args(args(parallel="ps", servers=2, asynchronous=True, staleness_bound=3))
    check_args(args(parallel="pipeline", schedule="gpipe", micro_batches=2, pipeline_stages=2))


def test_paths(tmp_path):
    with pytest.raises(
        UsageError, match="no such directory; expected ptb.train.txt, ptb.valid.txt and ptb.test.txt.*Mikolov"
    ):
        check_args(args(data=str(tmp_path / "nope")))
    (tmp_path / "ptb.train.txt").write_text("a\n")
    with pytest.raises(UsageError, match="missing ptb.valid.txt, ptb.test.txt"):
        check_args(args(data=str(tmp_path)))
    check_args(args(save=str(tmp_path / "missing" / "c.npz")))  # its folder is made (issue 32)
    assert (tmp_path / "missing").is_dir()
    (tmp_path / "a-file").write_text("")
    with pytest.raises(UsageError, match="--save .*cannot make the folder .*a-file"):
        check_args(args(save=str(tmp_path / "a-file" / "c.npz")))
    with pytest.raises(UsageError, match="--save .*is a folder"):
        check_args(args(save=str(tmp_path)))
    with pytest.raises(UsageError, match="--resume .*no such checkpoint"):
        check_args(args(resume=str(tmp_path / "none.npz")))
    with pytest.raises(UsageError, match="--text .*no such file"):
        check_args(args(text=str(tmp_path / "none.txt")))
    check_args(args(save=str(tmp_path / "c.npz")))


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes anywhere")
def test_unwritable_save_directory(tmp_path):
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0o500)
    try:
        with pytest.raises(UsageError, match="is not writable"):
            check_args(args(save=str(locked / "c.npz")))
    finally:
        locked.chmod(0o700)
