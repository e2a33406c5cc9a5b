"""--resume with settings the saved data position does not mean the same in: refused naming the flag (issue 11, case 8)."""

from __future__ import annotations

import re

import pytest

from minidl.train import cnn, lm

LM = ["--quick", "--log-every", "1000", "--epochs", "1"]


def refused(capsys, pattern, main, argv):
    """The run stops before training with one line (exit 2) that matches ``pattern`` (issue 32: no traceback)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_:
        main(argv)
    err = capsys.readouterr().err.strip()
    assert exit_.value.code == 2 and len(err.splitlines()) == 1 and re.search(pattern, err), err


def test_lm_resume_with_another_bptt_length_is_refused(tmp_path, capsys):
    ckpt = str(tmp_path / "lm.npz")
    lm.main(LM + ["--max-steps", "3", "--save", ckpt])
    bptt = r"num_steps = \d+, this run has 7: --num-steps \(the BPTT window"
    refused(capsys, bptt, lm.main, LM + ["--max-steps", "5", "--resume", ckpt, "--num-steps", "7"])
    batch = r"global_batch = \d+, this run has 3: --batch-size x ranks"
    refused(capsys, batch, lm.main, LM + ["--max-steps", "5", "--resume", ckpt, "--batch-size", "3"])
    lm.main(LM + ["--max-steps", "5", "--resume", ckpt])  # the same settings resume (exactly: test_train.py)


def test_cnn_resume_with_another_global_batch_is_refused(tmp_path, capsys):
    base = ["--quick", "--width", "4", "--epochs", "1", "--log-every", "1000"]
    ckpt = str(tmp_path / "cnn.npz")
    cnn.main(base + ["--batch-size", "50", "--max-steps", "2", "--save", ckpt])
    batch = r"global_batch = 50, this run has 25: --batch-size x ranks"
    refused(capsys, batch, cnn.main, base + ["--batch-size", "25", "--max-steps", "4", "--resume", ckpt])
