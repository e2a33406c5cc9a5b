"""The overlap tests' scenario: a small MLP trained data-parallel with or without overlap."""

from __future__ import annotations

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim


def make_model() -> nn.Module:
    return nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))


def run(comm, overlap: bool, fusion_bytes: int, passes: int = 1, algorithm: str = "ring"):
    minidl.set_default_dtype(np.float64)
    dist.init(comm)
    minidl.manual_seed(3)
    model = make_model()
    opt = dist.DistributedOptimizer(
        optim.SGD(model.parameters(), lr=0.1, momentum=0.9),
        allreduce=algorithm,
        fusion_bytes=fusion_bytes,
        backward_passes_per_step=passes,
        overlap=overlap,
    )
    rng = np.random.default_rng(comm.Get_rank())
    launched_during_backward = []
    for _ in range(3 * passes):
        x, y = rng.standard_normal((4, 6)), rng.integers(0, 3, size=4)
        opt.zero_grad()
        F.cross_entropy(model(minidl.tensor(x)), y).backward()
        if overlap and opt.will_update:
            launched_during_backward.append(opt.exchange.overlap.launched)
        opt.step()
    return {k: v.copy() for k, v in model.state_dict().items()}, launched_during_backward, len(opt.buckets)
