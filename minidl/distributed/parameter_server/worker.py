"""The worker side of the parameter server: push gradients, pull parameters (protocol in ``protocol.py``)."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.parameter_server.protocol import (
    ACCEPTED,
    ASYNC,
    ASYNC_BOUNDED,
    DONE,
    HEADER_BYTES,
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
    check_bound,
    check_roles,
    check_same_model,
    param_list,
    shards_of,
)
from minidl.distributed.timeout import activity
from minidl.nn.module import Module
from minidl.tensor import Tensor


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
        check_bound(staleness_bound, asynchronous)
        self.params = param_list(model)
        self.shards = shards_of(self.params, num_servers)
        self.asynchronous = asynchronous
        self.fetch_every = int(fetch_every)
        self.staleness_bound = staleness_bound
        self.mode = SYNC if not asynchronous else (ASYNC if staleness_bound is None else ASYNC_BOUNDED)
        check_same_model(self.comm, model, self.params, num_servers, self.mode)
        self.versions = [0] * num_servers  # the server version each shard of our copy comes from
        self.steps = 0  # gradients accepted
        self.rejected = 0
        self.bytes_sent = 0
        self.bytes_received = 0
        self.closed = False
        self.lost: list[int] = []  # workers the servers went on without (known at close())
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
            with activity("PSWorker.step", step=self.steps):  # named by a communication timeout
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

    def finish(self) -> None:
        """End of training (the protocol every optimizer shares): ``close()``."""
        self.close()

    def close(self) -> list[int]:
        """Tell every server this worker is done, and wait for each server's end (once all workers are done or
        lost): returns the workers the servers lost (also ``self.lost``), the same list on every rank left."""
        if not self.closed:
            comm = getattr(self.comm, "inner", self.comm)  # the end's bookkeeping, not the protocol's traffic
            masks = [np.zeros(comm.Get_size(), np.int64) for _ in self.shards]
            finish = [comm.Irecv(m, s, TAG_FINISH) for s, m in enumerate(masks)]  # posted before DONE is sent
            self._exchange(range(len(self.shards)), DONE, expect_reply=False)
            with activity("PSWorker.close, waiting for the servers' end"):
                type(finish[0]).Waitall(finish)
            self.lost = sorted(int(w) for w in np.flatnonzero(np.sum(masks, axis=0)))
            self.closed = True
        return self.lost


# ----------------------------------------------------------------------------- after the run
def collect_parameters(model: Module | Iterable[Tensor], comm: Any = None, num_servers: int = 1) -> None:
    """Give every rank the servers' final parameters: each server broadcasts its shard (call on all ranks,
    after ``serve()`` / ``close()``). An asynchronous worker's own copy may be older than the servers'."""
    from minidl.distributed.wire import broadcast_buffer

    comm = get_comm(comm)
    for shard in shards_of(param_list(model), num_servers):
        flat = np.empty(shard.numel, shard.dtype)
        if comm.Get_rank() == shard.server:
            shard.pack_values(flat)
        shard.unpack_values(broadcast_buffer(flat, root=shard.server, comm=comm))
