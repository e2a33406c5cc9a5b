"""The data-parallel ladder (issue 25): step 1 (average_gradients, an allreduce per parameter), step 2
(average_bucketed, fused buckets) and the DistributedOptimizer built on them give one process's gradient
of the whole batch; the settings object and the keyword settings are the same thing."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim

collectives = pytest.importorskip("collectives")
P, B = 3, 4  # ranks, examples per rank
rng = np.random.default_rng(0)
X, Y = rng.standard_normal((P * B, 5)), rng.integers(0, 3, P * B)


def model_and_loss(rows):
    minidl.manual_seed(1)
    model = nn.Sequential(nn.Linear(5, 7), nn.Tanh(), nn.Linear(7, 3))
    F.cross_entropy(model(minidl.tensor(X[rows])), Y[rows]).backward()
    return model


def one_process_gradients():
    minidl.set_default_dtype(np.float64)
    return [p.grad for p in model_and_loss(slice(None)).parameters()]


@pytest.mark.parametrize("average", ["average_gradients", "average_bucketed"])
def test_each_step_of_the_ladder_gives_the_whole_batch_gradient(average):
    def rank(comm):
        minidl.set_default_dtype(np.float64)
        dist.init(comm)
        model = model_and_loss(slice(comm.Get_rank() * B, (comm.Get_rank() + 1) * B))
        getattr(dist, average)(list(model.parameters()), comm)
        return [p.grad for p in model.parameters()]

    expected = one_process_gradients()
    for grads in collectives.simulate(P, rank):
        for g, e in zip(grads, expected):
            np.testing.assert_allclose(g, e, rtol=1e-12, atol=1e-15)


def test_settings_object_and_keywords_are_one_thing():
    minidl.set_default_dtype(np.float64)
    params = list(model_and_loss(slice(None)).parameters())
    settings = dist.ExchangeSettings(allreduce="tree", fusion_bytes=0, backward_passes_per_step=2)
    opt = dist.DistributedOptimizer(optim.SGD(params, lr=0.1), settings, comm=dist.comm.SingleProcess())
    same = dist.DistributedOptimizer(
        optim.SGD(params, lr=0.1), allreduce="tree", fusion_bytes=0, backward_passes_per_step=2, comm=opt.comm
    )
    assert opt.settings == same.settings and len(opt.buckets) == len(params)
    with pytest.raises(TypeError, match=r"unknown setting\(s\) \['fusion_mb'\]"):
        dist.DistributedOptimizer(optim.SGD(params, lr=0.1), fusion_mb=4, comm=opt.comm)
    with pytest.raises(TypeError, match="allreduce='ring'"):
        dist.DistributedOptimizer(optim.SGD(params, lr=0.1), "ring", comm=opt.comm)
    with pytest.raises(ValueError, match="backward_passes_per_step"):
        dist.ExchangeSettings(backward_passes_per_step=0)
