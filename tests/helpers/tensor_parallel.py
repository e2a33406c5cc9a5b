"""Builders of tests/test_tensor_parallel.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from helpers.model_parallel import lm_batches, make_lm
from minidl import nn, optim
from minidl.distributed.counting import CountingComm
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import tensor_parallel as tp
from minidl.models.lm import Recurrent

STEPS = 3
RTOL = 1e-8


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def assert_close(got, want, rtol: float = RTOL, what: str = "") -> None:
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-300), err_msg=what)


# ----------------------------------------------------------------------------- scenarios (shared with tests/mpi)
def make_mlp_block() -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    """fc1 (6 -> 11), fc2 (11 -> 5): the MLP block; head (5 -> 7): a column-parallel classifier."""
    minidl.manual_seed(9)
    return nn.Linear(6, 11), nn.Linear(11, 5), nn.Linear(5, 7)


def mlp_batches(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((8, 6)), rng.integers(0, 7, 8)) for _ in range(steps)]


def dense_mlp_loss(fc1, fc2, head, x, y):
    return F.cross_entropy(head(fc2(fc1(x).relu()).tanh()), y)


def train_mlp_dense(steps: int = STEPS) -> list[np.ndarray]:
    fc1, fc2, head = make_mlp_block()
    params = [*fc1.parameters(), *fc2.parameters(), *head.parameters()]
    opt = optim.SGD(params, lr=0.4, momentum=0.5)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        dense_mlp_loss(fc1, fc2, head, minidl.tensor(x), y).backward()
        opt.step()
    return [p.data for p in params]


def train_mlp(comm, steps: int = STEPS, gather_head: bool = True) -> tuple[list[np.ndarray], int]:
    """The same model, fc1/fc2 as a ParallelMLP and the head column-parallel (gathered logits, or the
    vocabulary-parallel loss); returns the gathered dense parameters and the bytes this rank sent."""
    counting = CountingComm(comm)
    fc1, fc2, head = make_mlp_block()
    mlp = tp.ParallelMLP.from_dense(fc1, nn.ReLU(), fc2, comm=counting)
    col = tp.ColumnParallelLinear.from_dense(head, gather_output=gather_head, comm=counting)
    del fc1, fc2, head
    opt = optim.SGD([*mlp.parameters(), *col.parameters()], lr=0.4, momentum=0.5)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        logits = col(mlp(minidl.tensor(x)).tanh())
        loss = (
            F.cross_entropy(logits, y)
            if gather_head
            else tp.vocab_parallel_cross_entropy(logits, y, col.out_range.start, counting)
        )
        loss.backward()
        opt.step()
    sent = counting.bytes_sent
    gathered = [*tp.gather_linear(mlp.fc1), *tp.gather_linear(mlp.fc2), *tp.gather_linear(col)]
    return gathered, sent


def train_lm(comm, layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> dict:
    """The LM of tests/test_model_parallel.py with its decoder (the last unit's Linear) split by vocabulary and
    the vocabulary-parallel loss (compare with its ``train_lm_dense``): the dense state dict on every rank."""
    units, decoder, name = tp.shard_last_unit(make_lm(layers).units(), False, comm)
    net = nn.Sequential(*(u for _, u in units))
    own = list(decoder.parameters())
    replicated = [p for p in net.parameters() if all(p is not q for q in own)]
    opt = optim.SGD(net.parameters(), lr=0.7)
    for x, y in lm_batches(steps):
        for _, unit in units:
            if isinstance(unit, Recurrent):
                unit.start_window()
        logits = net(x)
        opt.zero_grad()
        tp.vocab_parallel_cross_entropy(logits, y.reshape(-1), decoder.out_range.start, comm).backward()
        mp.clip_grad_norm_split(own, max_norm, comm, replicated)
        opt.step()
    state = mp.dense_names(net.state_dict(), [n for n, _ in units])
    state[f"{name}.weight"], state[f"{name}.bias"] = tp.gather_linear(decoder)
    return state


# ----------------------------------------------------------------------------- shards


# ----------------------------------------------------------------------------- layers against dense


# ----------------------------------------------------------------------------- training exactness


# ----------------------------------------------------------------------------- communication volume
