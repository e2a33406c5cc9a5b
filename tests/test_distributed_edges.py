"""Distributed training at its edges (issue 27), on simulated ranks: a checkpoint with an object on one rank fails
on every rank (not on that rank while the others wait), and fp16 compression says when a gradient underflows."""

import warnings

import numpy as np
import pytest
from helpers.ranks import on_every_rank

import collectives
import minidl.distributed as dist
from minidl import nn, optim
from minidl.distributed.data_parallel import compression


@pytest.mark.parametrize("bad_rank", [0, 2])
def test_a_rank_state_with_an_object_fails_on_every_rank(tmp_path, bad_rank):
    def fn(comm):
        dist.init(comm)
        rank_state = {"rng": "x", "extra": object() if comm.Get_rank() == bad_rank else 1}
        dist.save_checkpoint(str(tmp_path / "c.npz"), nn.Linear(2, 2), rank_state=rank_state, comm=comm)

    out = on_every_rank(3, fn)
    assert out[bad_rank][0] == "TypeError" and "cannot send a object" in out[bad_rank][1]
    others = [o for r, o in enumerate(out) if r != bad_rank]
    assert all(kind == "MismatchError" for kind, _ in others), out
    assert f"save_checkpoint: ranks [{bad_rank}] have a rank_state that cannot be saved" in others[0][1]
    assert not (tmp_path / "c.npz").exists()


def test_a_shared_state_with_an_object_fails_on_every_rank(tmp_path):
    def fn(comm):
        dist.init(comm)
        dist.save_checkpoint(str(tmp_path / "c.npz"), nn.Linear(2, 2), state={"epoch": object()}, comm=comm)

    out = on_every_rank(2, fn)
    assert out[0][0] == "TypeError" and out[1][0] == "MismatchError", out
    assert f"save_checkpoint: ranks [0] could not write {str(tmp_path / 'c.npz')!r}" in out[1][1]


def test_fp16_compression_reports_gradients_it_flushes_to_zero(monkeypatch):
    monkeypatch.setattr(compression, "_underflow_reported", False)

    def fn(comm):
        dist.init(comm)
        p = nn.Parameter(np.zeros(4, np.float32))
        opt = dist.DistributedOptimizer(optim.SGD([p], lr=1.0), compression="fp16")
        p.grad = np.array([1e-8, 1e-8, 1.0, 0.0], np.float32)
        opt.step()
        return p.data.copy()

    with pytest.warns(compression.UnderflowWarning, match=r"2 of \d+ gradient values .* went on the wire as 0"):
        out = collectives.simulate(2, fn)
    np.testing.assert_array_equal(out[0], [0, 0, -1, 0])  # what fp16 does to them: reported, not hidden
    with warnings.catch_warnings():  # once a process, not once a step
        warnings.simplefilter("error")
        compression.report_underflow(np.array([1e-9]), np.zeros(1, np.float16))
