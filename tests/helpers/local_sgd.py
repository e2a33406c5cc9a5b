"""Builders of tests/test_local_sgd.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import pytest

import minidl.distributed as dist
from helpers.parameter_server import (
    B,
    loss_on,
    make_model,
    worker_batch,
)
from minidl import optim

collectives = pytest.importorskip("collectives")

STEPS = 4


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def run_local_sgd(comm, k: int, steps: int = STEPS, lr: float = 0.2, b: int = B, gradient_averaging: bool = False):
    """Every rank trains its replica on its batches; returns the final state and the wrapper."""
    dist.init(comm)
    model = make_model()
    dist.broadcast_parameters(model)
    base = optim.SGD(model.parameters(), lr=lr)
    opt = dist.DistributedOptimizer(base) if gradient_averaging else dist.LocalSGD(base, average_every=k)
    P, r = comm.Get_size(), comm.Get_rank()
    for t in range(steps):
        opt.zero_grad()
        loss_on(model, worker_batch(t, r, P, b)).backward()
        opt.step()
    if not gradient_averaging and opt.steps % k:
        opt.average()
    return model.state_dict(), opt
