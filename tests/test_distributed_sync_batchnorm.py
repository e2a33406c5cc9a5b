"""SyncBatchNorm with unusual per-rank inputs, on the simulated communicator (P = 3 thread-ranks).

* A rank with an empty local batch takes part with zero counts (PyTorch's behaviour): the result is
  that of one process on the other ranks' examples; only an empty *global* batch is an error.
* A rank whose input cannot be normalized with the others' (wrong channels or dimensions, another
  dtype) makes every rank raise an error naming it, instead of raising alone and leaving the others
  waiting in the statistics allreduce. Every simulation has a timeout, and the simulator reports a
  deadlock at once, so a hang fails the test.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
from minidl import nn

collectives = pytest.importorskip("collectives")

P, C = 3, 3
TIMEOUT = 20


def _inputs(batch_sizes: list[int], length: int = 2) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """Per-rank inputs [b_r, C, length] and upstream gradients of the same shapes (float64)."""
    rng = np.random.default_rng(0)
    xs = [rng.normal(1.0, 2.0, size=(b, C, length)) for b in batch_sizes]
    gs = [rng.normal(size=(b, C, length)) for b in batch_sizes]
    return xs, gs


def _train_step(bn: nn.Module, x: np.ndarray, g: np.ndarray) -> dict[str, np.ndarray]:
    bn.weight.data[...] = [0.5, 1.0, 2.0]
    bn.bias.data[...] = [0.1, -0.2, 0.3]
    xt = minidl.tensor(x, requires_grad=True)
    y = bn(xt)
    (y * minidl.tensor(g)).sum().backward()
    return {
        "y": y.data,
        "dx": xt.grad,
        "dweight": bn.weight.grad,
        "dbias": bn.bias.grad,
        "running_mean": bn.running_mean.copy(),
        "running_var": bn.running_var.copy(),
    }


@pytest.mark.parametrize("batch_sizes", [[4, 0, 3], [0, 0, 2]])
def test_an_empty_local_batch_contributes_zero_counts(batch_sizes):
    xs, gs = _inputs(batch_sizes)

    def rank_fn(comm):
        bn = dist.SyncBatchNorm(C, dtype=np.float64, comm=comm)
        return _train_step(bn, xs[comm.Get_rank()], gs[comm.Get_rank()])

    out = collectives.simulate(P, rank_fn, timeout=TIMEOUT)
    ref = _train_step(nn.BatchNorm1d(C, dtype=np.float64), np.concatenate(xs), np.concatenate(gs))
    splits = np.cumsum(batch_sizes)[:-1]
    for name in ("y", "dx"):
        for r, part in enumerate(np.split(ref[name], splits)):
            assert out[r][name].shape == (batch_sizes[r], C, 2)
            np.testing.assert_allclose(out[r][name], part, rtol=1e-10, atol=1e-12, err_msg=f"{name} rank {r}")
    for name in ("dweight", "dbias"):  # per-rank sums of the global batch's terms (the optimizer averages them)
        np.testing.assert_allclose(sum(o[name] for o in out), ref[name], rtol=1e-10, atol=1e-12)
    for name in ("running_mean", "running_var"):
        for o in out:
            np.testing.assert_allclose(o[name], ref[name], rtol=1e-12)


@pytest.mark.parametrize(
    "batch_sizes, message", [([0, 0, 0], "empty input on every rank"), ([0, 1, 0], "more than 1 value per channel")]
)
def test_a_too_small_global_batch_raises_on_every_rank(batch_sizes, message):
    xs, _ = _inputs(batch_sizes, length=1)  # M = total batch size

    def rank_fn(comm):
        bn = dist.SyncBatchNorm(C, dtype=np.float64, comm=comm)
        try:
            bn(minidl.tensor(xs[comm.Get_rank()]))
        except ValueError as e:
            return str(e)
        return None

    errors = collectives.simulate(P, rank_fn, timeout=TIMEOUT)
    assert all(e is not None and message in e for e in errors), errors


def _bad_input(kind: str) -> np.ndarray:
    return {
        "channels": np.ones((4, C + 2, 2)),
        "ndim": np.ones((4,)),
        "six_dims": np.ones((4, C, 1, 1, 1, 2)),
        "dtype": np.ones((4, C, 2), dtype=np.float32),
    }[kind]


@pytest.mark.parametrize(
    "kind, message",
    [
        ("channels", r"rank 1: .*with 3 channels in dimension 1, got shape \(4, 5, 2\)"),
        ("ndim", r"rank 1: expected a 2-D or 3-D or 4-D or 5-D input .* got shape \(4,\)"),
        ("six_dims", r"rank 1: .*got shape \(4, 3, 1, 1, 1, 2\)"),
        ("dtype", r"different dtypes: ranks \[0, 2\] float64, rank 1 float32"),
    ],
)
@pytest.mark.parametrize("training", [True, False])
def test_a_bad_input_on_one_rank_raises_on_every_rank(kind, message, training):
    """Training: the statistics allreduce carries the check. Eval with running statistics does not
    communicate, so only the bad rank raises (on its own, nobody waits for it)."""

    def rank_fn(comm):
        bn = dist.SyncBatchNorm(C, dtype=np.float64, comm=comm)
        bn.train(training)
        x = _bad_input(kind) if comm.Get_rank() == 1 else np.ones((4, C, 2))
        try:
            bn(minidl.tensor(x))
        except ValueError as e:
            return type(e).__name__, str(e)
        return None

    out = collectives.simulate(P, rank_fn, timeout=TIMEOUT)
    if training:
        assert all(o is not None and o[0] == "MismatchError" and re.search(message, o[1]) for o in out), out
        assert len({o[1] for o in out}) == 1  # the same message everywhere
    elif kind != "dtype":  # eval: plain BatchNorm per rank, a float32 input is normalized as usual
        assert out[0] is None and out[2] is None and out[1][0] == "ValueError", out


def test_untracked_statistics_in_eval_mode_also_check_every_rank():
    """track_running_stats=False normalizes with batch statistics in eval mode too: a collective there."""

    def rank_fn(comm):
        bn = dist.SyncBatchNorm(C, track_running_stats=False, dtype=np.float64, comm=comm).eval()
        x = _bad_input("channels") if comm.Get_rank() == 2 else np.ones((4, C, 2))
        try:
            bn(minidl.tensor(x))
        except ValueError as e:
            return str(e)
        return None

    errors = collectives.simulate(P, rank_fn, timeout=TIMEOUT)
    assert all(e is not None and "rank 2:" in e for e in errors), errors


def test_good_inputs_cost_no_extra_messages():
    """The check rides in the forward's statistics allgather: as many messages as a bare allgather of it."""

    def layer(comm):
        dist.SyncBatchNorm(C, dtype=np.float64, comm=comm)(minidl.tensor(np.ones((4, C, 2))))

    def bare(comm):
        collectives.allgather(comm, np.ones(3 * C + 3 + 6))

    assert len(collectives.simulate(P, layer).messages) == len(collectives.simulate(P, bare).messages)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling"])
def test_large_mean_statistics_merge_accurately(algorithm):
    """Issue 12, bug 2: per-rank [count, mean, M2] merged by Chan's formula give one process's accuracy for
    float64 data of mean 1e6 and std 1e-2 in uneven parts (summed x and x^2 were off by ~1 here)."""
    rng = np.random.default_rng(3)
    sizes = [5, 1, 6]
    xs = [1e6 + 1e-2 * rng.standard_normal((b, C, 4)) for b in sizes]

    def rank_fn(comm):
        bn = dist.SyncBatchNorm(C, dtype=np.float64, comm=comm, algorithm=algorithm, eps=1e-10)
        return bn(minidl.tensor(xs[comm.Get_rank()])).data, bn.running_mean.copy(), bn.running_var.copy()

    out = collectives.simulate(P, rank_fn, timeout=TIMEOUT)
    dev = np.concatenate(xs) - 1e6  # exact: the deviations without the large mean
    m, v = dev.mean(axis=(0, 2), keepdims=True), dev.var(axis=(0, 2), keepdims=True)
    ref = np.split((dev - m) / np.sqrt(v + 1e-10), np.cumsum(sizes)[:-1])
    for r, (y, running_mean, running_var) in enumerate(out):
        np.testing.assert_allclose(y, ref[r], rtol=0, atol=1e-7, err_msg=f"rank {r}")
        np.testing.assert_allclose(running_mean, 0.9 * 0 + 0.1 * (1e6 + m.ravel()), rtol=1e-15)
        np.testing.assert_allclose(running_var, 0.9 + 0.1 * v.ravel() * 48 / 47, rtol=1e-12)
