"""Builders of tests/test_model_parallel.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.counting import CountingComm
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import p2p
from minidl.models.lm import LSTMLanguageModel, Recurrent

STEPS = 3
RTOL = 1e-8


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def assert_same_state(got: dict, want: dict, rtol: float = RTOL) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol * np.abs(want[k]).max(), err_msg=k)


# ----------------------------------------------------------------------------- scenarios (shared with tests/mpi)
def make_mlp(depth: int = 6) -> nn.Sequential:
    """Linear/Tanh/ReLU layers alternating: `depth` Linear layers, 2*depth - 1 modules."""
    minidl.manual_seed(7)
    layers: list[nn.Module] = []
    widths = [5, 8, 7, 6, 9, 4, 3, 5, 6][: depth + 1]
    for i in range(depth):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < depth - 1:
            layers.append(nn.Tanh() if i % 2 else nn.ReLU())
    return nn.Sequential(*layers)


def mlp_batches(steps: int = STEPS, batch: int = 6) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((batch, 5)), rng.integers(0, 3, batch)) for _ in range(steps)]


def make_lm(layers: int = 2) -> LSTMLanguageModel:
    minidl.manual_seed(3)
    return LSTMLanguageModel(13, 6, num_layers=layers, init_scale=0.3)


def lm_batches(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [(rng.integers(0, 13, (4, 3)), rng.integers(0, 13, (4, 3))) for _ in range(steps)]


def train_sequential_dense(steps: int = STEPS) -> dict:
    model = make_mlp()
    opt = optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        F.cross_entropy(model(minidl.tensor(x)), y).backward()
        opt.step()
    return model.state_dict()


def train_sequential(comm, steps: int = STEPS, balance=None) -> tuple[dict | None, int]:
    """k SGD steps of the split MLP; returns (the gathered state on rank 0, bytes this rank sent)."""
    counting = CountingComm(comm)
    stage = mp.SequentialStage(make_mlp(), counting, balance=balance)
    params = list(stage.parameters())  # empty for a stage of only activations (balance [5, 1, 5])
    opt = optim.SGD(params, lr=0.3, momentum=0.9) if params else None
    for x, y in mlp_batches(steps):
        stage.zero_grad()
        out = stage(minidl.tensor(x) if stage.is_first else None)
        (F.cross_entropy(out, y) if stage.is_last else out).backward()
        if opt:
            opt.step()
    sent = counting.bytes_sent
    return mp.gather_state_dict(stage, comm=comm), sent


def train_lm_dense(layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> dict:
    model = make_lm(layers)
    opt = optim.SGD(model.parameters(), lr=0.7)
    state = None
    for x, y in lm_batches(steps):
        logits, state = model(x, None if state is None else model.detach_state(state))
        opt.zero_grad()
        F.cross_entropy(logits, y.reshape(-1)).backward()
        optim.clip_grad_norm(list(model.parameters()), max_norm)
        opt.step()
    return model.state_dict()


def train_lm(comm, layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> tuple[dict | None, int]:
    """Truncated BPTT on the LM's units split over the ranks, with global-norm clipping; (gathered state on
    rank 0 under the model's own names, bytes sent)."""
    counting = CountingComm(comm)
    units = make_lm(layers).units()
    stage = mp.SequentialStage(units, counting)
    opt = optim.SGD(stage.parameters(), lr=0.7)
    for x, y in lm_batches(steps):
        for _, unit in units:
            if isinstance(unit, Recurrent):
                unit.start_window()  # the LSTM states go on to the next window, their history does not
        out = stage(x if stage.is_first else None)
        opt.zero_grad()
        (F.cross_entropy(out, y.reshape(-1)) if stage.is_last else out).backward()
        mp.clip_grad_norm_split(stage.parameters(), max_norm, comm)
        opt.step()
    counted = counting.bytes_sent
    return mp.gather_state_dict(stage, comm=comm, names=[n for n, _ in units]), counted


# ----------------------------------------------------------------------------- partition


# ----------------------------------------------------------------------------- p2p ops
W0 = np.random.default_rng(1).standard_normal((3, 4))
W1 = np.random.default_rng(2).standard_normal((4, 2))
X0 = np.random.default_rng(3).standard_normal((5, 3))


def two_rank_chain(comm, w0: np.ndarray, w1: np.ndarray, x: np.ndarray, backward: bool = True):
    """tanh(x w0) on rank 0, sent to rank 1, which computes sum(sin-free (h w1)^2); grads of w0 / w1 and x."""
    if comm.Get_rank() == 0:
        w, xt = minidl.tensor(w0, requires_grad=True), minidl.tensor(x, requires_grad=True)
        token = p2p.send((xt @ w).tanh(), 1, comm, tag=4)
        if backward:
            token.backward()
        return w.grad, xt.grad
    w = minidl.tensor(w1, requires_grad=True)
    h = p2p.recv((x.shape[0], w0.shape[1]), np.float64, 0, comm, tag=4)
    loss = ((h @ w) ** 2).sum()
    if backward:
        loss.backward()
    return w.grad, loss.item()


# ----------------------------------------------------------------------------- whole models: exactness


# ----------------------------------------------------------------------------- communication volume


# ----------------------------------------------------------------------------- misuse
