"""ZeRO's test scenario: a small MLP that cuts into units, trained by plain data parallelism or ZeRO."""

from __future__ import annotations

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim

STEPS, BATCH = 3, 4
OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.1),
    "momentum": lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3),
    "adam": lambda ps: optim.Adam(ps, lr=1e-2),
}


class Units(nn.Module):
    """A small MLP that cuts into units (stage 3 gathers each one around its forward)."""

    def __init__(self):
        super().__init__()
        self.a, self.b, self.c = nn.Linear(5, 7), nn.Linear(7, 6), nn.Linear(6, 3)

    def units(self):
        return [self.a, self.b, self.c]

    def forward(self, x):
        return self.c(self.b(self.a(x).tanh()).relu())


def data(rank: int, step: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 * step + rank)
    return rng.standard_normal((BATCH, 5)), rng.integers(0, 3, size=BATCH)


def train(comm, kind: str, stage: int | None, clip: float | None = None) -> dict[str, np.ndarray]:
    """STEPS steps on this rank's batches: stage None is DistributedOptimizer (ring), else ZeRO."""
    minidl.set_default_dtype(np.float64)
    dist.init(comm)
    minidl.manual_seed(7)
    model = Units()
    base = OPTIMIZERS[kind](model.parameters())
    if stage is None:
        opt = dist.DistributedOptimizer(base, allreduce="ring")
    else:
        opt = dist.ZeroOptimizer(base, stage=stage, module=model)
    for step in range(STEPS):
        x, y = data(comm.Get_rank(), step)
        opt.zero_grad()
        F.cross_entropy(model(minidl.tensor(x)), y).backward()
        opt.synchronize()
        if clip is not None:
            if stage is None:
                optim.clip_grad_norm(model.parameters(), clip)
            else:
                opt.clip_grad_norm(clip)
        opt.step()
    if stage is not None:
        opt.finish()
    return {k: v.copy() for k, v in model.state_dict().items()}
