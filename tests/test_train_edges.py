"""python -m minidl.train at its edges (issue 27): a run that diverges (--lr 1e30) exits non-zero, and an
--eval-batch-size, --batch-size or --hidden-size too large is one line naming the flag before any training."""

import re

import pytest

from minidl.train.__main__ import main

QUICK = ["lm", "--quick", "--dtype", "float64", "--log-every", "1000"]


def test_a_run_that_diverges_exits_nonzero(capsys):
    assert main([*QUICK, "--lr", "1e30", "--max-steps", "6"]) == 1
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.startswith("python -m minidl.train: error: the run diverged: the training loss is nan or inf by step 6")
    assert re.search(r"test_ppl (nan|inf)", err) and "--lr" in err


@pytest.mark.parametrize(
    "flag,value,words",
    [
        ("--eval-batch-size", "100000", "--eval-batch-size: 100000 streams is more than the valid split has words"),
        ("--batch-size", "100000", "--batch-size: 100000 streams is more than the training split has words"),
        ("--hidden-size", str(10**11), "the model does not fit in memory (Unable to allocate"),
    ],
)
def test_sizes_too_large_are_named_before_training(capsys, flag, value, words):
    with pytest.raises(SystemExit) as exit_:
        main([*QUICK, flag, value, "--max-steps", "2"])
    assert exit_.value.code == 2
    out, err = capsys.readouterr()
    assert words in err and "step" not in out  # nothing trained
    if flag == "--hidden-size":
        assert f"make it smaller (--hidden-size {value}, --layers 1)" in err
