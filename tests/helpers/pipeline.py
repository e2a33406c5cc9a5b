"""Builders of tests/test_pipeline.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.pipeline.engine import Pipeline, split_sequential
from minidl.distributed.pipeline.schedule import (
    BACKWARD,
    FORWARD,
)

IN, HIDDEN, CLASSES, BLOCKS = 5, 7, 3, 5  # 5 hidden blocks + the output layer: 6 stages at most
BATCH, STEPS, LR, MOMENTUM = 12, 2, 0.1, 0.9


# ----------------------------------------------------------------------------- shared helpers
def make_model(seed: int = 0) -> nn.Sequential:
    """Six layers with parameters (each block Linear + Tanh), so any p <= 6 gives every stage weights."""
    minidl.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(IN if k == 0 else HIDDEN, HIDDEN), nn.Tanh()) for k in range(BLOCKS)]
    return nn.Sequential(*blocks, nn.Linear(HIDDEN, CLASSES))


def make_batches(steps: int = STEPS, batch: int = BATCH, seed: int = 1) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(seed)
    return [(rng.standard_normal((batch, IN)), rng.integers(0, CLASSES, batch)) for _ in range(steps)]


def train_single(batches) -> dict[str, np.ndarray]:
    """The reference: one process, whole mini-batches."""
    model = make_model()
    opt = optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model.state_dict()


def train_pipeline(comm, batches, sched: str, micro: int, dp_comm=None) -> tuple[dict[str, np.ndarray], Pipeline]:
    """This rank's stage trained through the pipeline on ``comm``; with ``dp_comm``, gradients are
    averaged over it (each replica passes its own shard of every batch). Returns the stage's
    parameters under their names in the full model, and the Pipeline (its last step's records)."""
    model = make_model()
    p, s = comm.Get_size(), comm.Get_rank()
    stage = split_sequential(model, p, s)
    pipe = Pipeline(stage, F.cross_entropy, sched, micro, comm)
    opt = optim.SGD(stage.parameters(), lr=LR, momentum=MOMENTUM)
    if dp_comm is not None:
        opt = dist.DistributedOptimizer(opt, comm=dp_comm)
    for x, y in batches:
        opt.zero_grad()
        pipe.train_step(x if pipe.is_first else None, y if pipe.is_last else None)
        opt.step()
    return stage.state_dict(), pipe


def assert_matches(got: dict[str, np.ndarray], want: dict[str, np.ndarray], what: str = "") -> None:
    assert got, f"{what}no parameters to compare"
    for k, v in got.items():
        np.testing.assert_allclose(v, want[k], rtol=1e-8, atol=1e-12, err_msg=f"{what}{k}")


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def simulate_f64(p, fn, *args):
    def body(comm, *a):
        minidl.set_default_dtype(np.float64)  # the default dtype is per thread
        return fn(comm, *a)

    return collectives.simulate(p, body, *args)


# ----------------------------------------------------------------------------- schedules
def dependencies_respected(ops_per_stage) -> bool:
    """Can the stages' op orders all run? (F(s,i) needs F(s-1,i); B(s,i) needs B(s+1,i) and F(s,i).)"""
    p = len(ops_per_stage)
    ideal_done, pos = set(), [0] * p
    progressed = True
    while progressed:
        progressed = False
        for s in range(p):
            while pos[s] < len(ops_per_stage[s]):
                kind, i = ops_per_stage[s][pos[s]]
                need = [(FORWARD, s - 1, i)] if kind == FORWARD and s > 0 else []
                if kind == BACKWARD:
                    need = [(FORWARD, s, i)] + ([(BACKWARD, s + 1, i)] if s < p - 1 else [])
                if not all(n in ideal_done for n in need):
                    break
                ideal_done.add((kind, s, i))
                pos[s] += 1
                progressed = True
    return all(pos[s] == len(ops_per_stage[s]) for s in range(p))


# ----------------------------------------------------------------------------- exactness


# ----------------------------------------------------------------------------- records


# ----------------------------------------------------------------------------- errors


# ----------------------------------------------------------------------------- the simulated Split
