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

A server receives requests from ``ANY_SOURCE`` and learns the sender from the ``Status``. A worker
posts its reply receives *before* it sends its requests, so a server's reply never waits on a
worker that is itself waiting to send: the protocol cannot deadlock, even with synchronous sends.
Shutdown: each worker sends DONE to every server; a server returns from ``serve()`` once all
workers are done. A protocol error (mismatched models, modes, or a synchronous worker that stops
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

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidl.distributed.context import get_comm
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor

TAG_REQUEST, TAG_REPLY = 7101, 7102
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


def _check_bound(staleness_bound: int | None, asynchronous: bool) -> None:
    if staleness_bound is not None and (
        not asynchronous or int(staleness_bound) != staleness_bound or staleness_bound < 0
    ):
        raise ValueError(
            "staleness_bound needs asynchronous=True and must be an integer >= 0, "
            f"got {staleness_bound!r} with asynchronous={asynchronous}"
        )


def _param_list(model_or_params: Module | Iterable[Tensor]) -> list[Tensor]:
    params = list(model_or_params.parameters() if isinstance(model_or_params, Module) else model_or_params)
    if not params:
        raise ValueError("parameter server: no parameters")
    dtypes = {p.data.dtype for p in params}
    if len(dtypes) != 1:
        raise TypeError(f"parameter server: all parameters must share one dtype, got {sorted(map(str, dtypes))}")
    return params


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


def _mpi_names(comm: Any) -> tuple[Any, int]:
    """A fresh ``Status`` and the ``ANY_SOURCE`` value of ``comm``'s kind (simulated or mpi4py)."""
    from collectives import simulated

    base = getattr(comm, "inner", comm)  # see through a CountingComm
    if isinstance(base, simulated.SimulatedComm):
        return simulated.Status(), simulated.ANY_SOURCE
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


# ----------------------------------------------------------------------------- the server
class ParameterServer:
    """The server side: holds one shard of the parameters and its optimizer; ``serve()`` runs it.

    Args:
        model: the model (or its parameter list) in the same architecture the workers use; this
            server keeps the tensors of its shard, and their current values are what workers pull first.
        make_optimizer: called with this server's list of Parameters, returns the optimizer
            (e.g. ``lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9)``).
        num_servers: S; servers are ranks 0..S-1 and workers S..P-1.
        asynchronous: apply each gradient on arrival (Downpour) instead of averaging all W per step.
        staleness_bound: asynchronous only: refuse gradients more than this many updates old.
        after_update: called with the new version after every optimizer step (e.g. an LR scheduler's step).
    """

    def __init__(
        self,
        model: Module | Iterable[Tensor],
        make_optimizer: Callable[[list[Tensor]], Optimizer],
        comm: Any = None,
        num_servers: int = 1,
        asynchronous: bool = False,
        staleness_bound: int | None = None,
        after_update: Callable[[int], Any] | None = None,
    ):
        self.comm = get_comm(comm)
        size, rank = self.comm.Get_size(), self.comm.Get_rank()
        check_roles(size, num_servers)
        if rank >= num_servers:
            raise ValueError(f"ParameterServer on rank {rank}: servers are ranks 0..{num_servers - 1}")
        _check_bound(staleness_bound, asynchronous)
        self.shard = shards_of(_param_list(model), num_servers)[rank]
        self.optimizer = make_optimizer(self.shard.params)
        self.workers = list(range(num_servers, size))
        self.asynchronous = asynchronous
        self.staleness_bound = staleness_bound
        self.mode = SYNC if not asynchronous else (ASYNC if staleness_bound is None else ASYNC_BOUNDED)
        self.version = 0  # updates applied so far (synchronous: averaged steps)
        self.after_update = after_update
        self.stats = ServerStats(rank, MODE_NAMES[self.mode], len(self.workers))
        self._inbox = Message(self.shard.dtype, self.shard.numel)
        self._outbox = Message(self.shard.dtype, self.shard.numel)

    # -- messages
    def _receive(self, status: Any, any_source: int) -> tuple[int, int, int, int, int]:
        """The next request from any worker: (source, kind, version, step, numel); payload in the inbox."""
        self.comm.Recv(self._inbox.buf, source=any_source, tag=TAG_REQUEST, status=status)
        src, count = status.Get_source(), status.Get_count()
        kind, version, step, numel = (int(v) for v in self._inbox.header)
        expected = HEADER_BYTES + (self.shard.nbytes if kind == PUSH else 0)
        if src not in self.workers or kind not in KIND_NAMES or count != expected or numel != self.shard.numel:
            raise RuntimeError(
                f"parameter server {self.comm.Get_rank()}: bad request from rank {src} (kind {kind}, {count} bytes, "
                f"numel {numel}); this server holds {self.shard.numel} values ({self.shard.nbytes} bytes): do the "
                "workers build the same model with the same num_servers?"
            )
        self.stats.bytes_received += count
        return src, kind, version, step, numel

    def _reply(self, dest: int, status: int, with_params: bool) -> Any:
        out = self._outbox.fill(status, self.version, self.mode, self.shard.numel)
        if with_params:
            self.shard.pack_values(out.payload)
            buf = out.buf
        else:
            buf = out.head_only()
        self.stats.bytes_sent += buf.size
        self.comm.Send(buf, dest, TAG_REPLY)

    def _apply(self, grads: list[np.ndarray], scale: float) -> None:
        """p.grad <- scale * sum of ``grads`` (in worker order: the same sum whatever the arrival order); step."""
        total = grads[0] * scale if len(grads) == 1 else np.sum(grads, axis=0) * scale
        for p, g in zip(self.shard.params, self.shard.views(total)):
            p.grad = g
        self.optimizer.step()
        for p in self.shard.params:
            p.grad = None
        self.version += 1
        if self.after_update is not None:
            self.after_update(self.version)

    # -- the loop
    def serve(self) -> ServerStats:
        """Answer requests until every worker has said DONE; returns the statistics."""
        status, any_source = _mpi_names(self.comm)
        start = time.perf_counter()
        done: set[int] = set()
        pending: dict[int, np.ndarray] = {}  # synchronous: this step's gradients so far, by worker
        joining: list[int] | None = []  # workers whose first pull waits for the others' (a common start)
        while len(done) < len(self.workers):
            src, kind, version, step, _ = self._receive(status, any_source)
            if kind == PULL and joining is not None:
                # Start barrier: the first pulls are answered together once every worker has asked, so all
                # start from version 0 (and no gradient arrives before everyone has joined).
                joining.append(src)
                if len(joining) == len(self.workers):
                    for w in joining:
                        self._pull(w)
                    joining = None
            elif joining is not None:
                raise RuntimeError(
                    f"parameter server: rank {src} sent {KIND_NAMES[kind]} before its first pull "
                    "(a PSWorker pulls when it is constructed)"
                )
            elif kind == PULL:
                self._pull(src)
            elif kind == DONE:
                done.add(src)
            elif self.asynchronous:
                self._push_async(src, version, start)
            else:
                if src in pending:
                    raise RuntimeError(
                        f"parameter server: worker {src} pushed twice in synchronous step {self.version + 1}"
                    )
                pending[src] = self._inbox.payload.copy()
            if not self.asynchronous and done and pending:
                raise RuntimeError(
                    f"parameter server (synchronous): worker(s) {sorted(done)} finished while worker(s) "
                    f"{sorted(pending)} pushed a gradient for step {self.version + 1}; every worker must run "
                    "the same number of steps"
                )
            if not self.asynchronous and len(pending) == len(self.workers):
                self._step_sync(pending, start)
                pending.clear()
        self.stats.seconds = time.perf_counter() - start
        return self.stats

    def _pull(self, dest: int) -> None:
        self.stats.pulls += 1
        self._reply(dest, PARAMS, with_params=True)

    def _push_async(self, src: int, version: int, start: float) -> None:
        staleness = self.version - version
        if self.staleness_bound is not None and staleness > self.staleness_bound:
            self.stats.rejected += 1
            self._reply(src, REJECTED, with_params=True)  # the refresh: current parameters
            return
        self._record(src, staleness, start)
        self._apply([self._inbox.payload], 1.0)
        if self.staleness_bound is not None:
            self._reply(src, ACCEPTED, with_params=False)

    def _step_sync(self, pending: dict[int, np.ndarray], start: float) -> None:
        for w in self.workers:
            self._record(w, 0, start)
        self._apply([pending[w] for w in self.workers], 1.0 / len(self.workers))
        self.stats.rounds += 1
        for w in self.workers:
            self._reply(w, ACCEPTED, with_params=True)

    def _record(self, worker: int, staleness: int, start: float) -> None:
        self.stats.updates += 1
        self.stats.staleness.append(staleness)
        self.stats.update_worker.append(worker)
        self.stats.update_time.append(time.perf_counter() - start)


# ----------------------------------------------------------------------------- the worker
class PSWorker:
    """The worker side: pushes its gradients to the servers and pulls their parameters into ``model``.

    Construction pulls the servers' current parameters (so every worker starts from them).

    Args:
        model: the model (or parameter list) this worker computes gradients with.
        num_servers, asynchronous, staleness_bound: must match the servers' (checked on the first reply).
        fetch_every: asynchronous only: pull fresh parameters after every ``fetch_every``-th step
            (Downpour's n_fetch); in between the worker computes on its old copy.
    """

    def __init__(
        self,
        model: Module | Iterable[Tensor],
        comm: Any = None,
        num_servers: int = 1,
        asynchronous: bool = False,
        fetch_every: int = 1,
        staleness_bound: int | None = None,
    ):
        self.comm = get_comm(comm)
        check_roles(self.comm.Get_size(), num_servers)
        if self.comm.Get_rank() < num_servers:
            raise ValueError(f"PSWorker on rank {self.comm.Get_rank()}: ranks 0..{num_servers - 1} are servers")
        if int(fetch_every) != fetch_every or fetch_every < 1:
            raise ValueError(f"fetch_every must be an integer >= 1, got {fetch_every!r}")
        if not asynchronous and fetch_every != 1:
            raise ValueError("fetch_every > 1 needs asynchronous=True (a synchronous worker pulls every step)")
        _check_bound(staleness_bound, asynchronous)
        self.params = _param_list(model)
        self.shards = shards_of(self.params, num_servers)
        self.asynchronous = asynchronous
        self.fetch_every = int(fetch_every)
        self.staleness_bound = staleness_bound
        self.mode = SYNC if not asynchronous else (ASYNC if staleness_bound is None else ASYNC_BOUNDED)
        self.versions = [0] * num_servers  # the server version each shard of our copy comes from
        self.steps = 0  # gradients accepted
        self.rejected = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.closed = False
        self._out = [Message(s.dtype, s.numel) for s in self.shards]
        self._in = [Message(s.dtype, s.numel) for s in self.shards]
        self.pull()

    def zero_grad(self) -> None:
        for p in self.params:
            p.grad = None

    # -- one exchange with a set of servers: post the reply receives, then send, then wait
    def _exchange(self, servers: Sequence[int], kind: int, expect_reply: bool) -> list[int]:
        """Send ``kind`` (with gradients if PUSH) to ``servers``; returns those whose reply said REJECTED."""
        if self.closed:
            raise RuntimeError("PSWorker: used after close()")
        requests, rejected = [], []
        if expect_reply:
            requests += [self.comm.Irecv(self._in[s].buf, s, TAG_REPLY) for s in servers]
        for s in servers:
            msg = self._out[s].fill(kind, self.versions[s], self.steps, self.shards[s].numel)
            if kind == PUSH:
                self.shards[s].pack_grads(msg.payload)
            buf = msg.buf if kind == PUSH else msg.head_only()
            self.bytes_sent += buf.size
            requests.append(self.comm.Isend(buf, s, TAG_REQUEST))
        type(requests[0]).Waitall(requests)
        if expect_reply:
            for s in servers:
                rejected += [s] if self._take_reply(s) == REJECTED else []
        return rejected

    def _take_reply(self, s: int) -> int:
        status, version, mode, numel = (int(v) for v in self._in[s].header)
        if mode != self.mode or numel != self.shards[s].numel:
            raise RuntimeError(
                f"PSWorker {self.comm.Get_rank()}: server {s} runs {MODE_NAMES.get(mode, mode)} with {numel} values; "
                f"this worker was started {MODE_NAMES[self.mode]} with {self.shards[s].numel}: start both alike"
            )
        carries_params = status in (PARAMS, REJECTED) or (status == ACCEPTED and self.mode == SYNC)
        self.bytes_received += HEADER_BYTES + (self.shards[s].nbytes if carries_params else 0)
        if carries_params:
            self.shards[s].unpack_values(self._in[s].payload)
            self.versions[s] = version
        return status

    # -- the public steps
    def pull(self) -> None:
        """Copy every server's current parameters into the model."""
        self._exchange(range(len(self.shards)), PULL, expect_reply=True)

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """Push this worker's gradients (``p.grad``); pull when due. Returns True if the servers applied them.

        Synchronous: returns once the averaged update is back in the model. Asynchronous with a
        staleness bound: a server may refuse a too-stale gradient and send fresh parameters instead;
        with ``closure`` (which must recompute the loss and call ``backward()``; gradients are zeroed
        before it) the gradient is recomputed on them and pushed again until accepted, without it
        the batch is dropped and False is returned.
        """
        pending = list(range(len(self.shards)))
        expect_reply = self.mode != ASYNC
        while True:
            pending = self._exchange(pending, PUSH, expect_reply)
            if not pending:
                break
            self.rejected += 1
            if closure is None:
                return False
            self.zero_grad()
            closure()
        self.steps += 1
        if self.mode != SYNC and self.steps % self.fetch_every == 0:
            self.pull()
        return True

    def close(self) -> None:
        """Tell every server this worker is done (each server returns from ``serve()`` once all are)."""
        if not self.closed:
            self._exchange(range(len(self.shards)), DONE, expect_reply=False)
            self.closed = True


# ----------------------------------------------------------------------------- after the run
def collect_parameters(model: Module | Iterable[Tensor], comm: Any = None, num_servers: int = 1) -> None:
    """Give every rank the servers' final parameters: each server broadcasts its shard (call on all ranks,
    after ``serve()`` / ``close()``). An asynchronous worker's own copy may be older than the servers'."""
    from minidl.distributed.broadcast import broadcast_buffer

    comm = get_comm(comm)
    for shard in shards_of(_param_list(model), num_servers):
        flat = np.empty(shard.numel, shard.dtype)
        if comm.Get_rank() == shard.server:
            shard.pack_values(flat)
        shard.unpack_values(broadcast_buffer(flat, root=shard.server, comm=comm))


__all__ = [
    "ParameterServer",
    "PSWorker",
    "ServerStats",
    "Shard",
    "assign_shards",
    "check_roles",
    "collect_parameters",
    "combine_stats",
    "is_server",
    "shards_of",
]
