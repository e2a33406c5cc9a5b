"""Parameter server on the simulated communicator (threads): synchronous = one process with the combined
batch (float64, 1e-8 relative), with one server or sharded ones; asynchronous converges and its
staleness is recorded (and bounded when asked); the wire traffic is what the protocol says; errors.

tests/mpi/test_parameter_server_mpi.py runs the same helpers under mpiexec.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.parameter_server.protocol import HEADER_BYTES, assign_shards, shards_of

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
@pytest.mark.parametrize("opt", ["sgd", "adam"])
@pytest.mark.parametrize("P,S", [(2, 1), (3, 1), (4, 1), (4, 2), (5, 2), (5, 3)])
def test_sync_ps_equals_single_process(P, S, opt):
    want = single_process(P - S, opt=opt)
    out = collectives.simulate(P, run_ps, S, STEPS, opt)
    for rank, (final, worker_copy, role) in enumerate(out):
        assert_same_state(final, want)
        if rank >= S:  # a synchronous worker pulls after every step: its copy is the servers'
            assert_same_state(worker_copy, want)
        else:
            assert role.rounds == STEPS and role.updates == STEPS * (P - S) and role.staleness_max == 0


def test_shards_are_whole_tensors_balanced_and_deterministic():
    sizes = [100, 3, 50, 50, 7, 1]
    owner = assign_shards(sizes, 3)
    # largest first, each to the least loaded server: 100 | 50 + 7 | 50 + 3 + 1
    assert owner == [0, 2, 1, 2, 1, 2]
    assert np.bincount(owner, weights=sizes).tolist() == [100, 57, 54]
    params = list(make_model().parameters())
    shards = shards_of(params, 2)
    assert sorted(id(p) for s in shards for p in s.params) == sorted(id(p) for p in params)
    with pytest.raises(ValueError, match="hold nothing"):
        assign_shards([4, 4], 3)


@settings(max_examples=60)
@given(st.lists(st.integers(1, 1000), min_size=1, max_size=30), st.integers(1, 8))
def test_greedy_shards_are_within_one_tensor_of_balanced(sizes, servers):
    servers = min(servers, len(sizes))
    owner = assign_shards(sizes, servers)
    loads = np.bincount(owner, weights=sizes, minlength=servers)
    assert loads.sum() == sum(sizes) and set(owner) <= set(range(servers))
    # the last tensor placed on the fullest server went to the least loaded one then (LPT scheduling)
    assert loads.max() - loads.min() <= max(sizes)


# ----------------------------------------------------------------------------- asynchronous
@pytest.mark.parametrize("P,S", [(3, 1), (4, 1), (5, 2)])
def test_async_ps_converges_and_records_staleness(P, S):
    steps, W = 50, P - S
    out = collectives.simulate(P, run_ps, S, steps, "plain", True, 1, None, True, True, 16)
    final = out[0][0]
    start = heldout_loss(make_model().state_dict())
    # from ~1.15 nats to ~0.2 (0.13 to 0.23 over repeated runs; the threshold leaves room for scheduling)
    assert heldout_loss(final) < 0.3 < start
    for s in range(S):
        stats = out[s][2]
        assert stats.updates == steps * W and stats.rejected == 0
        assert len(stats.staleness) == stats.updates
        # all workers start from version 0 (the start barrier); every first gradient but the first applied is stale
        assert stats.staleness_max >= 1
        assert stats.staleness_histogram().sum() == stats.updates
        assert "staleness mean" in stats.summary()


def test_async_fetch_every_makes_gradients_stale():
    out = collectives.simulate(2, run_ps, 1, 9, "sgd", True, 3)  # one worker, pulls every 3rd step
    stats = out[0][2]
    # after each pull the worker pushes 3 gradients from the same copy: staleness 0, 1, 2 exactly
    assert stats.staleness == [0, 1, 2] * 3


@pytest.mark.parametrize("use_closure", [True, False])
def test_staleness_bound_is_respected(use_closure):
    bound, steps, P = 1, 12, 4
    out = collectives.simulate(P, run_ps, 1, steps, "sgd", True, 3, bound, use_closure)
    stats = out[0][2]
    workers = [o[2] for o in out[1:]]
    assert stats.staleness_max <= bound
    assert stats.rejected >= 1  # the 3rd gradient from one copy would be 2 updates old
    assert stats.rejected == sum(w.rejected for w in workers)
    if use_closure:  # a refused gradient is recomputed on the refreshed parameters until applied
        assert stats.updates == steps * (P - 1)
    else:  # refused batches are dropped
        assert stats.updates == steps * (P - 1) - stats.rejected


# ----------------------------------------------------------------------------- bytes on the wire
def test_sync_ps_traffic_is_what_the_protocol_says():
    P, S, steps = 4, 1, 3
    W = P - S

    def fn(comm):
        counted = dist.TrafficComm(comm)
        run_ps(counted, S, steps, collect=False)
        return counted.sent_to.copy()

    rows = np.stack(collectives.simulate(P, fn))
    nbytes = sum(p.data.nbytes for p in make_model().parameters())
    # worker -> server: 1 pull header, `steps` pushes (header + gradient), 1 done header
    assert (rows[1:, 0] == HEADER_BYTES * (steps + 2) + steps * nbytes).all()
    # server -> each worker: the first pull's and every step's parameters, each with a header
    assert (rows[0, 1:] == (steps + 1) * (HEADER_BYTES + nbytes)).all()
    # the server moves W times what a worker moves: the centralized bottleneck
    server_total = rows[0].sum() + rows[:, 0].sum()
    worker_total = rows[1].sum() + rows[:, 1].sum()
    assert server_total == W * worker_total


# ----------------------------------------------------------------------------- errors
def test_errors_are_clear():
    with pytest.raises(ValueError, match="leave no worker"):
        collectives.simulate(2, run_ps, 2)

    def early_finisher(comm):
        dist.init(comm)
        model = make_model()
        if comm.Get_rank() == 0:
            return dist.ParameterServer(model, OPTIMIZERS["sgd"], comm).serve()
        worker = dist.PSWorker(model, comm)
        for _ in range(1 if comm.Get_rank() == 1 else 3):
            loss_on(model, slice(0, B)).backward()
            worker.step()
        worker.close()

    with pytest.raises(RuntimeError, match="same number of steps"):
        collectives.simulate(3, early_finisher)

    def mismatched_mode(comm):
        dist.init(comm)
        if comm.Get_rank() == 0:
            return dist.ParameterServer(make_model(), OPTIMIZERS["sgd"], comm, asynchronous=True).serve()
        dist.PSWorker(make_model(), comm, asynchronous=False)

    with pytest.raises(collectives.MismatchError, match="ranks disagree on \\['mode'\\]"):
        collectives.simulate(2, mismatched_mode)  # found by the layout check before the first message

    def mismatched_model(comm):
        dist.init(comm)
        if comm.Get_rank() == 0:
            return dist.ParameterServer(make_model(), OPTIMIZERS["sgd"], comm).serve()
        dist.PSWorker(nn.Linear(IN, 2), comm)

    with pytest.raises(collectives.MismatchError, match="first difference at parameter 0"):
        collectives.simulate(2, mismatched_model)

    def bad_worker_args(comm):
        dist.init(comm)
        if comm.Get_rank() == 1:
            with pytest.raises(ValueError, match="needs asynchronous"):
                dist.PSWorker(make_model(), comm, fetch_every=2)
            with pytest.raises(ValueError, match="staleness_bound needs asynchronous"):
                dist.PSWorker(make_model(), comm, staleness_bound=1)
        else:
            with pytest.raises(ValueError, match="needs asynchronous"):
                dist.ParameterServer(make_model(), OPTIMIZERS["sgd"], comm, staleness_bound=2)
            with pytest.raises(ValueError, match="are servers"):
                dist.PSWorker(make_model(), comm)

    collectives.simulate(2, bad_worker_args)
