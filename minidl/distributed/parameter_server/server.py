"""The server side of the parameter server (the protocol, roles and shards are in ``protocol.py``)."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.parameter_server.protocol import (
    ACCEPTED,
    ASYNC,
    ASYNC_BOUNDED,
    DONE,
    HEADER_BYTES,
    KIND_NAMES,
    MODE_NAMES,
    PARAMS,
    PULL,
    PUSH,
    REJECTED,
    SYNC,
    TAG_FINISH,
    TAG_REPLY,
    TAG_REQUEST,
    Message,
    ServerStats,
    check_bound,
    check_roles,
    check_same_model,
    mpi_names,
    param_list,
    shards_of,
)
from minidl.distributed.timeout import activity
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor


class LostWorkerError(RuntimeError):
    """A synchronous parameter server's worker sent nothing for ``lost_after`` seconds (no --drop-lost-workers)."""


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
        lost_after: seconds of silence after which a worker the server waits for counts as lost (None: wait on).
            Asynchronous: the server goes on without it (its share of the work is not done). Synchronous: with
            ``drop_lost_workers`` the step is averaged over the workers left, else ``LostWorkerError`` names it.
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
        lost_after: float | None = None,
        drop_lost_workers: bool = False,
    ):
        self.comm = get_comm(comm)
        size, rank = self.comm.Get_size(), self.comm.Get_rank()
        check_roles(size, num_servers)
        if rank >= num_servers:
            raise ValueError(f"ParameterServer on rank {rank}: servers are ranks 0..{num_servers - 1}")
        check_bound(staleness_bound, asynchronous)
        params = param_list(model)
        self.shard = shards_of(params, num_servers)[rank]
        self.optimizer = make_optimizer(self.shard.params)
        self.workers = list(range(num_servers, size))
        self.num_servers = num_servers
        self.asynchronous = asynchronous
        self.staleness_bound = staleness_bound
        self.mode = SYNC if not asynchronous else (ASYNC if staleness_bound is None else ASYNC_BOUNDED)
        check_same_model(self.comm, model, params, num_servers, self.mode)
        self.version = 0  # updates applied so far (synchronous: averaged steps)
        self.after_update = after_update
        self.stats = ServerStats(rank, MODE_NAMES[self.mode], len(self.workers))
        self._inbox = Message(self.shard.dtype, self.shard.numel)
        self._outbox = Message(self.shard.dtype, self.shard.numel)
        self.lost_after, self.drop_lost_workers = lost_after, drop_lost_workers
        self.lost: list[int] = []  # workers given up on (``lost_after``)
        self.active = list(self.workers)
        self.last_seen: dict[int, float] = {}

    # -- messages
    def _receive(
        self, status: Any, any_source: int, waiting: Callable[[], set[int]] | None = None
    ) -> tuple[int, int, int, int, int] | set[int]:
        """The next request from any worker: (source, kind, version, step, numel); payload in the inbox.
        With ``lost_after``, polls, and gives up on the workers in ``waiting()`` silent that long (None)."""
        if self.lost_after is not None and waiting is not None:
            while not self.comm.Iprobe(source=any_source, tag=TAG_REQUEST, status=status):
                now = time.perf_counter()
                silent = {w for w in waiting() if now - self.last_seen[w] > self.lost_after}
                if silent:
                    return silent
                time.sleep(0.001)
        self.comm.Recv(self._inbox.buf, source=any_source, tag=TAG_REQUEST, status=status)
        src, count = status.Get_source(), status.Get_count()
        if src in self.lost:
            raise RuntimeError(f"parameter server {self.comm.Get_rank()}: worker {src} spoke after it was given up")
        self.last_seen[src] = time.perf_counter()
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
        """Answer requests until every worker has said DONE (or, with ``lost_after``, was given up); returns the
        statistics."""
        status, any_source = mpi_names(self.comm)
        start = time.perf_counter()
        self.active = list(self.workers)  # the workers still taking part
        self.last_seen = dict.fromkeys(self.workers, start)
        done: set[int] = set()
        pending: dict[int, np.ndarray] = {}  # synchronous: this step's gradients so far, by worker
        joining: list[int] | None = []  # workers whose first pull waits for the others' (a common start)

        def waiting() -> set[int]:  # the workers the server waits to hear from (none at the start barrier)
            if joining is not None:
                return set()
            return {w for w in self.active if w not in done and (self.asynchronous or w not in pending)}

        while len(done) < len(self.active):
            with activity("ParameterServer.serve, waiting for workers", step=self.version):
                got = self._receive(status, any_source, waiting)
            if isinstance(got, set):
                self._give_up(got, pending, start)
                continue
            src, kind, version, step, _ = got
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
            else:
                self._handle(src, kind, version, done, pending, start)
        self.stats.seconds = time.perf_counter() - start
        self._finish()
        self.stats.lost = list(self.lost)
        return self.stats

    def _finish(self) -> None:
        """The last message (TAG_FINISH): tell the workers left and the other servers which workers this server
        lost, and learn the other servers' (so every rank left ends with the same ``lost``, ``survivors.py``).
        Past a CountingComm: the end's bookkeeping, not the protocol's traffic."""
        comm = getattr(self.comm, "inner", self.comm)
        mine = np.zeros(comm.Get_size(), np.int64)
        mine[self.lost] = 1
        servers = [s for s in range(self.num_servers) if s != comm.Get_rank()]
        theirs = [np.zeros_like(mine) for _ in servers]
        requests = [comm.Irecv(m, s, TAG_FINISH) for m, s in zip(theirs, servers)]
        requests += [comm.Isend(mine, dest, TAG_FINISH) for dest in servers + self.active]
        if requests:
            with activity("ParameterServer.serve, the end"):
                type(requests[0]).Waitall(requests)
        self.lost = sorted(set(self.lost) | {int(w) for m in theirs for w in np.flatnonzero(m)})

    def _handle(self, src: int, kind: int, version: int, done: set[int], pending: dict, start: float) -> None:
        """One request after the start barrier: a pull, a DONE, or a gradient (applied now, or at the step's end)."""
        if kind == PULL:
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
        if not self.asynchronous and pending and len(pending) == len(self.active):
            self._step_sync(pending, start)
            pending.clear()

    def _give_up(self, silent: set[int], pending: dict, start: float) -> None:
        """Workers silent for ``lost_after`` seconds: go on without them (asynchronous, or synchronous with
        ``drop_lost_workers``: the step then averages the workers left), else end the job naming them."""
        names, rank = ", ".join(str(w) for w in sorted(silent)), self.comm.Get_rank()
        if not self.asynchronous and not self.drop_lost_workers:
            raise LostWorkerError(
                f"parameter server {rank} (synchronous): worker(s) {names} sent nothing for {self.lost_after:g} s; "
                "the step cannot complete (--drop-lost-workers goes on without them)"
            )
        self.lost += sorted(silent)
        self.active = [w for w in self.active if w not in silent]
        if not self.active:
            raise LostWorkerError(f"parameter server {rank}: every worker is lost (the last: {names})")
        print(
            f"parameter server {rank}: worker(s) {names} lost (silent {self.lost_after:g} s), "
            f"going on with {len(self.active)} worker(s)",
            file=sys.stderr,
            flush=True,
        )
        if not self.asynchronous and pending and len(pending) == len(self.active):
            self._step_sync(pending, start)
            pending.clear()

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
        for w in self.active:
            self._record(w, 0, start)
        self._apply([pending[w] for w in self.active], 1.0 / len(self.active))
        self.stats.rounds += 1
        now = time.perf_counter()
        for w in self.active:
            self._reply(w, ACCEPTED, with_params=True)
            self.last_seen[w] = now  # a worker that waited for this reply was not silent: its clock restarts

    def _record(self, worker: int, staleness: int, start: float) -> None:
        self.stats.updates += 1
        self.stats.staleness.append(staleness)
        self.stats.update_worker.append(worker)
        self.stats.update_time.append(time.perf_counter() - start)
