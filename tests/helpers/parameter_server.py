"""Builders of tests/test_parameter_server.py, shared with the tests under mpiexec (tests/mpi)."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim

collectives = pytest.importorskip("collectives")

B, STEPS, RTOL = 3, 4, 1e-8
IN, HIDDEN, CLASSES = 5, 7, 3
OPTIMIZERS = {
    "sgd": lambda ps: optim.SGD(ps, lr=0.3, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: optim.Adam(ps, lr=0.05),
    "plain": lambda ps: optim.SGD(ps, lr=0.2),  # asynchronous: stale momentum would overshoot
}


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


# ----------------------------------------------------------------------------- shared helpers (also tests/mpi)
def make_model() -> nn.Module:
    minidl.manual_seed(7)
    return nn.Sequential(nn.Linear(IN, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES))


def data(n: int = 400, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Inputs and labels from a random linear teacher: a generated task a small MLP learns well."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, IN))
    teacher = rng.standard_normal((IN, CLASSES)) * 2.0
    return x, np.argmax(x @ teacher, axis=1)


X, Y = data()


def worker_batch(step: int, worker: int, workers: int, b: int = B) -> slice:
    """Worker w's slice of global batch ``step`` (of workers * b consecutive rows, wrapping around)."""
    start = ((step * workers + worker) * b) % (len(X) - b)
    return slice(start, start + b)


def loss_on(model: nn.Module, sl: slice) -> minidl.Tensor:
    return F.cross_entropy(model(minidl.tensor(X[sl])), Y[sl])


def single_process(workers: int, steps: int = STEPS, opt: str = "sgd") -> dict[str, np.ndarray]:
    """One process, batch workers * b: the reference for every synchronous scheme."""
    model = make_model()
    optimizer = OPTIMIZERS[opt](list(model.parameters()))
    for t in range(steps):
        optimizer.zero_grad()
        start = worker_batch(t, 0, workers).start  # the workers' slices of this step, concatenated
        loss_on(model, slice(start, start + workers * B)).backward()
        optimizer.step()
    return model.state_dict()


def run_ps(
    comm,
    num_servers: int = 1,
    steps: int = STEPS,
    opt: str = "sgd",
    asynchronous: bool = False,
    fetch_every: int = 1,
    staleness_bound=None,
    use_closure: bool = True,
    collect: bool = True,
    b: int = B,
):
    """Every rank: servers serve, workers train; returns (final state from the servers, this rank's own copy,
    ServerStats or PSWorker). ``collect=False``: skip gathering the servers' parameters (final = own copy)."""
    dist.init(comm)
    model = make_model()
    workers = comm.Get_size() - num_servers
    if dist.is_server(comm, num_servers):
        role = dist.ParameterServer(
            model, OPTIMIZERS[opt], comm, num_servers, asynchronous=asynchronous, staleness_bound=staleness_bound
        ).serve()
    else:
        role = dist.PSWorker(
            model,
            comm,
            num_servers,
            asynchronous=asynchronous,
            fetch_every=fetch_every,
            staleness_bound=staleness_bound,
        )
        w = comm.Get_rank() - num_servers
        for t in range(steps):
            sl = worker_batch(t, w, workers, b)
            role.zero_grad()
            loss_on(model, sl).backward()
            role.step((lambda sl=sl: loss_on(model, sl).backward()) if use_closure else None)
        role.close()
    worker_copy = {k: v.copy() for k, v in model.state_dict().items()}
    if collect:
        dist.collect_parameters(model, comm, num_servers)
    return model.state_dict(), worker_copy, role


def assert_same_state(got: dict, want: dict, rtol: float = RTOL) -> None:
    assert got.keys() == want.keys()
    for k in want:
        scale = max(np.abs(want[k]).max(), 1e-300)
        err = np.abs(got[k] - want[k]).max() / scale
        assert err <= rtol, f"{k}: relative difference {err:.2e} > {rtol:.0e}"


def heldout_loss(state: dict) -> float:
    model = make_model()
    model.load_state_dict(state)
    with minidl.no_grad():
        return float(F.cross_entropy(model(minidl.tensor(X)), Y).item())


# ----------------------------------------------------------------------------- synchronous: exact


# ----------------------------------------------------------------------------- asynchronous


# ----------------------------------------------------------------------------- bytes on the wire


# ----------------------------------------------------------------------------- errors
