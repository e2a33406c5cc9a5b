"""A parameter server: server ranks hold the parameters and the optimizer, workers push gradients and pull parameters.

The centralized alternative to allreduce (Dean et al. 2012, "Large Scale Distributed Deep
Networks" (DistBelief / Downpour SGD); Li et al. 2014, "Scaling Distributed Machine Learning with
the Parameter Server"). Ranks ``0 .. S-1`` are servers; ranks ``S .. P-1`` are workers. The
parameters are sharded over the servers, whole tensors at a time (largest first, each to the least
loaded server), so any optimizer (SGD, Adam, LARS) runs on a server exactly as it would on one process.

Each step a worker computes a gradient on its own data, **pushes** the gradient of each shard to
its server and **pulls** fresh parameters back:

- **synchronous**: a server waits for all W workers' gradients, applies their average
  ``(1/W) sum_w g_w`` with the optimizer, then sends the new parameters to every worker. W workers
  with batch b take exactly the steps of one process with batch W*b (the same algebra as
  allreduce averaging), but every byte goes through the server: it receives and sends W copies
  of its shard per step, while an allreduce rank moves about 2x the model whatever P is.
- **asynchronous** (Downpour): a server applies each gradient the moment it arrives
  (``p <- p - lr g_w``); workers never wait for each other, and pull only every ``fetch_every``
  steps. A gradient computed on parameter version v and applied when the server is at version t
  has **staleness** t - v (the number of updates it missed). The server records it per update.
  With ``staleness_bound=s`` it refuses a gradient whose staleness exceeds s and sends the
  worker fresh parameters instead; the worker recomputes (``step(closure)``) or drops the batch.

Wire protocol: buffer-based messages only (no pickle), one message per request or reply, a
``uint8`` buffer of a 4-int64 header followed by the payload (a shard's values as raw bytes)::

    request (tag TAG_REQUEST), worker -> server:  [kind, version, step, numel] [gradient, if PUSH]
    reply   (tag TAG_REPLY),   server -> worker:  [status, version, mode, numel] [parameters, if sent]
    finish  (tag TAG_FINISH),  server -> workers left and other servers, once: int64[P], 1 = a lost worker

A server receives requests from ``ANY_SOURCE`` and learns the sender from the ``Status``. A worker
posts its reply receives *before* it sends its requests, so a server's reply never waits on a
worker that is itself waiting to send: the protocol cannot deadlock, even with synchronous sends.
Shutdown: each worker sends DONE to every server; a server returns from ``serve()`` once all
workers are done (or given up as lost, ``lost_after``). Its last message (tag TAG_FINISH, past the
traffic counts) goes to every worker still there and to the other servers: an int64 mask over the
ranks, 1 for a worker it lost. ``PSWorker.close()`` waits for it from every server, so every rank
that is left ends knowing the same lost workers, and can finish the job without them (``survivors.py``). A protocol error (mismatched models, modes, or a synchronous worker that stops
early) raises; under ``dist.run`` that aborts the job instead of hanging it.

Usage (``mpiexec -n 3``: 1 server, 2 workers)::

    comm = dist.init()
    model = make_model()                       # same architecture everywhere; the servers' values win
    if dist.is_server(comm, num_servers=1):
        stats = dist.ParameterServer(model, lambda ps: optim.SGD(ps, lr=0.1), comm=comm,
                                     asynchronous=True).serve()
        print(stats.summary())                 # updates, staleness mean / max / histogram
    else:
        worker = dist.PSWorker(model, comm=comm, asynchronous=True, fetch_every=1)
        for x, y in my_batches:
            worker.zero_grad()
            loss_fn(model(x), y).backward()
            worker.step()                      # push; pull when due
        worker.close()
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.timeout import base_comm
from minidl.nn.module import Module
from minidl.tensor import Tensor

TAG_REQUEST, TAG_REPLY, TAG_FINISH = 7101, 7102, 7103
HEADER_WORDS = 4
HEADER_BYTES = 8 * HEADER_WORDS

# request kinds
PUSH, PULL, DONE = 1, 2, 3
KIND_NAMES = {PUSH: "PUSH", PULL: "PULL", DONE: "DONE"}
# reply statuses
ACCEPTED, REJECTED, PARAMS = 0, 1, 2
# modes, sent in every reply so a worker started in another mode gets a clear error
SYNC, ASYNC, ASYNC_BOUNDED = 0, 1, 2
MODE_NAMES = {SYNC: "synchronous", ASYNC: "asynchronous", ASYNC_BOUNDED: "asynchronous with a staleness bound"}


# ----------------------------------------------------------------------------- roles and shards
def is_server(comm: Any = None, num_servers: int = 1) -> bool:
    """True on the server ranks ``0 .. num_servers-1``; checks that at least one worker is left."""
    comm = get_comm(comm)
    check_roles(comm.Get_size(), num_servers)
    return comm.Get_rank() < num_servers


def check_roles(size: int, num_servers: int) -> None:
    if int(num_servers) != num_servers or num_servers < 1:
        raise ValueError(f"parameter server: num_servers must be an integer >= 1, got {num_servers!r}")
    if size <= num_servers:
        raise ValueError(
            f"parameter server: {size} ranks with {num_servers} server(s) leave no worker; "
            f"run with at least {num_servers + 1} ranks (mpiexec -n {num_servers + 1})"
        )


def assign_shards(sizes: Sequence[int], num_servers: int) -> list[int]:
    """The server of each parameter: largest first, each to the least loaded server (ties: lowest rank).

    Whole tensors, not slices, so a layer-wise optimizer (LARS) sees each tensor whole. Every rank
    computes the same assignment from the same sizes.
    """
    if num_servers > len(sizes):
        raise ValueError(
            f"parameter server: {num_servers} servers for {len(sizes)} parameter tensors; a server would hold "
            "nothing (use at most as many servers as tensors)"
        )
    load = [0] * num_servers
    owner = [0] * len(sizes)
    for i in sorted(range(len(sizes)), key=lambda i: (-sizes[i], i)):
        s = min(range(num_servers), key=lambda s: (load[s], s))
        owner[i] = s
        load[s] += int(sizes[i])
    return owner


def check_bound(staleness_bound: int | None, asynchronous: bool) -> None:
    if staleness_bound is not None and (
        not asynchronous or int(staleness_bound) != staleness_bound or staleness_bound < 0
    ):
        raise ValueError(
            "staleness_bound needs asynchronous=True and must be an integer >= 0, "
            f"got {staleness_bound!r} with asynchronous={asynchronous}"
        )


def param_list(model_or_params: Module | Iterable[Tensor]) -> list[Tensor]:
    params = list(model_or_params.parameters() if isinstance(model_or_params, Module) else model_or_params)
    if not params:
        raise ValueError("parameter server: no parameters")
    dtypes = {p.data.dtype for p in params}
    if len(dtypes) != 1:
        raise TypeError(f"parameter server: all parameters must share one dtype, got {sorted(map(str, dtypes))}")
    return params


def check_same_model(comm: Any, model: Any, params: list[Tensor], num_servers: int, mode: int) -> None:
    """Collective over servers and workers, before the first message: the same parameters (names, order, shapes,
    dtypes), the same number of servers and the same mode on every rank, else the same MismatchError on all.
    Without it a worker whose model declares its parameters in another order pushes gradients into the wrong
    tensors of the same shape."""
    from minidl.distributed.fingerprint import check_layout, parameter_rows

    if isinstance(model, Module):
        named: Iterable[tuple[str | None, Tensor]] = model.named_parameters()
    else:
        named = ((None, p) for p in params)
    settings = [("num_servers", int(num_servers), int), ("mode", mode, lambda m: MODE_NAMES[m])]
    # a one-time check, not the protocol's traffic: past a CountingComm, which measures the protocol
    check_layout(getattr(comm, "inner", comm), parameter_rows(named), "parameter server", settings)


@dataclass
class Shard:
    """The parameters one server holds, in model order, and the layout of their flat payload."""

    server: int
    params: list[Tensor]
    dtype: np.dtype
    offsets: list[int]
    numel: int

    @classmethod
    def of(cls, params: list[Tensor], owner: list[int], server: int) -> Shard:
        mine = [p for p, s in zip(params, owner) if s == server]
        offsets = list(np.cumsum([0] + [p.data.size for p in mine])[:-1])
        return cls(server, mine, params[0].data.dtype, [int(o) for o in offsets], sum(p.data.size for p in mine))

    @property
    def nbytes(self) -> int:
        return self.numel * self.dtype.itemsize

    def views(self, flat: np.ndarray) -> list[np.ndarray]:
        """Each parameter's part of a flat payload, shaped like the parameter (views, no copies)."""
        return [flat[o : o + p.data.size].reshape(p.data.shape) for p, o in zip(self.params, self.offsets)]

    def pack_values(self, flat: np.ndarray) -> None:
        for v, p in zip(self.views(flat), self.params):
            v[...] = p.data

    def pack_grads(self, flat: np.ndarray) -> None:
        """Gradients into ``flat``; a parameter with no gradient is sent as zeros."""
        for v, p in zip(self.views(flat), self.params):
            if p.grad is None:
                v[...] = 0
            else:
                v[...] = p.grad

    def unpack_values(self, flat: np.ndarray) -> None:
        for v, p in zip(self.views(flat), self.params):
            p.data[...] = v


def shards_of(params: list[Tensor], num_servers: int) -> list[Shard]:
    owner = assign_shards([p.data.size for p in params], num_servers)
    return [Shard.of(params, owner, s) for s in range(num_servers)]


class Message:
    """A reusable message buffer: ``header`` (4 int64) and ``payload`` (the shard's dtype) are views of ``buf``."""

    def __init__(self, dtype: np.dtype, numel: int):
        self.buf = np.zeros(HEADER_BYTES + numel * np.dtype(dtype).itemsize, np.uint8)
        self.header = self.buf[:HEADER_BYTES].view(np.int64)
        self.payload = self.buf[HEADER_BYTES:].view(dtype)

    def fill(self, a: int, b: int, c: int, d: int) -> Message:
        self.header[:] = (a, b, c, d)
        return self

    def head_only(self) -> np.ndarray:
        return self.buf[:HEADER_BYTES]


def mpi_names(comm: Any) -> tuple[Any, int]:
    """A fresh ``Status`` and the ``ANY_SOURCE`` value of ``comm``'s kind (simulated or mpi4py)."""
    from collectives import inprocess

    base = base_comm(comm)  # see through a CountingComm or a TimeoutComm
    if isinstance(base, inprocess.SimulatedComm):
        return inprocess.Status(), inprocess.ANY_SOURCE
    from mpi4py import MPI

    return MPI.Status(), MPI.ANY_SOURCE


# ----------------------------------------------------------------------------- statistics
@dataclass
class ServerStats:
    """What one server saw: every applied update's worker and staleness, rejections, message counts."""

    server: int
    mode: str
    workers: int
    updates: int = 0
    rounds: int = 0  # synchronous: averaged steps (each counts W gradients)
    staleness: list[int] = field(default_factory=list)  # per applied gradient
    update_worker: list[int] = field(default_factory=list)
    update_time: list[float] = field(default_factory=list)  # seconds since serve() started
    rejected: int = 0
    pulls: int = 0
    bytes_received: int = 0
    bytes_sent: int = 0
    seconds: float = 0.0
    lost: list[int] = field(default_factory=list)  # workers given up on (``lost_after``)

    @property
    def staleness_mean(self) -> float:
        return float(np.mean(self.staleness)) if self.staleness else 0.0

    @property
    def staleness_max(self) -> int:
        return int(max(self.staleness)) if self.staleness else 0

    def staleness_histogram(self) -> np.ndarray:
        """``h[s]`` = number of applied gradients with staleness s."""
        return np.bincount(np.asarray(self.staleness, dtype=np.int64), minlength=1)

    def summary(self) -> str:
        hist = " ".join(f"{s}:{n}" for s, n in enumerate(self.staleness_histogram()) if n)
        text = (
            f"server {self.server} ({self.mode}, {self.workers} workers): {self.updates} gradients applied"
            + (f" in {self.rounds} averaged steps" if self.rounds else "")
            + f", staleness mean {self.staleness_mean:.2f} max {self.staleness_max} [{hist}]"
        )
        if self.rejected:
            text += f", {self.rejected} rejected as too stale"
        return text

    def as_dict(self) -> dict[str, Any]:
        return {
            "server": self.server,
            "mode": self.mode,
            "updates": self.updates,
            "rejected": self.rejected,
            "staleness_mean": self.staleness_mean,
            "staleness_max": self.staleness_max,
            "staleness_histogram": self.staleness_histogram().tolist(),
        }


def combine_stats(stats: Sequence[ServerStats]) -> ServerStats:
    """One record over several servers (sharded), e.g. for a table; staleness lists are concatenated."""
    out = ServerStats(-1, stats[0].mode, stats[0].workers)
    for s in stats:
        out.updates += s.updates
        out.rounds = max(out.rounds, s.rounds)
        out.staleness += s.staleness
        out.rejected += s.rejected
        out.pulls += s.pulls
        out.bytes_received += s.bytes_received
        out.bytes_sent += s.bytes_sent
        out.seconds = max(out.seconds, s.seconds)
    return out
