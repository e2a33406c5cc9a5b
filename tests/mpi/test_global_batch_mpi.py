"""``--global-batch N`` under mpiexec (issue 32): P ranks dividing one process's global batch take one process's
steps and reach its perplexity (to rounding); the header says the global batch, the steps against one process's
and the learning-rate rule in force.

Run: mpiexec -n P python -m pytest -q -p no:cacheprovider tests/mpi/test_global_batch_mpi.py
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from minidl.train import lm

# float64 and a tiny model: one process's result to rounding, in a second. 60 divides over 2, 3, 4 and 5 ranks.
ARGS = ["--quick", "--dtype", "float64", "--hidden-size", "16", "--num-steps", "5", "--max-steps", "6"]
ARGS += ["--log-every", "3", "--eval-batch-size", "60"]


def test_global_batch_gives_one_process_result(comm, capsys):
    P = comm.Get_size()
    par = lm.main([*ARGS, "--parallel", "data", "--global-batch", "60"])
    out = capsys.readouterr().out
    one = lm.main([*ARGS, "--batch-size", "60"])
    capsys.readouterr()
    assert par["steps"] == one["steps"] == 6
    assert par["test_ppl"] == pytest.approx(one["test_ppl"], rel=1e-10)
    for k in one["params"]:
        np.testing.assert_allclose(par["params"][k], one["params"][k], rtol=1e-8, atol=1e-12, err_msg=k)
    if comm.Get_rank() == 0:
        assert f"B={60 // P} streams/rank" in out
        assert (
            f"global batch 60 = {P} x {60 // P}: 6 optimizer steps, as one process; lr 5, tuned for batch 10, not scaled (--lr-scaling linear scales it)"
            in out
        )


def test_the_header_says_the_global_batch_the_steps_and_the_rate(comm, capsys):
    """Without --global-batch: batch 2 per rank is a global batch of 2P, fewer steps than one process's (batch 2)
    takes over the same epochs; --lr-scaling linear prints the rate it sets, in the header and the steps."""
    P = comm.Get_size()
    small = ["--quick", "--hidden-size", "8", "--num-steps", "50", "--epochs", "1", "--log-every", "1"]
    small += ["--eval-batch-size", "2"]
    scaled = lm.main([*small, "--parallel", "data", "--batch-size", "2", "--lr-scaling", "linear", "--base-batch", "2"])
    out = capsys.readouterr().out
    if comm.Get_rank() == 0:
        one_process = 20_000 // 2 // 50  # the quick corpus's 20,000 training words in 2 streams of windows of 50
        line = re.search(r"global batch .*", out).group(0)
        assert line == (
            f"global batch {2 * P} = {P} x 2: {scaled['steps']} optimizer steps against {one_process - 1} for one "
            f"process; --lr-scaling linear: lr 5 x {2 * P}/2 = {5 * P:g}"
        ), line
        assert f"SGD lr {5 * P:g} (" in out and f"| lr {5 * P:g} |" in out
