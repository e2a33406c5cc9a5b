"""A communicator you can hold in your hand: P ranks as threads of one process.

``simulate(P, fn, *args)`` runs ``fn(comm, *args)`` on P threads, each with a ``SimulatedComm``
that speaks the subset of mpi4py the collectives use: ``Get_rank``, ``Get_size``, ``Send``,
``Recv``, ``Sendrecv``, ``Isend``, ``Irecv``, requests with ``Wait``/``Test``/``Waitall``,
``Barrier``, ``Dup`` and ``Split``. Buffers are NumPy arrays (or other contiguous buffers), never pickled objects.

Semantics follow MPI:
- Matching: a receive takes the first pending message with its source and tag (``ANY_SOURCE``,
  ``ANY_TAG`` match anything); messages between two ranks are non-overtaking; receives are matched
  in the order they were posted.
- Sends are synchronous (MPI_Ssend): a send completes only once a receive has taken it. Real MPI
  may buffer short messages, but a program correct here is correct under any MPI; one that relies
  on buffering deadlocks here, as it would under MPI for long messages.
- A message longer than the receive buffer is an error (MPI_ERR_TRUNCATE), raised by the receiver.

Every point-to-point message is recorded (``Message``: step, source, dest, tag, bytes, arrival),
on the world and on any ``Dup`` or ``Split`` of it (with world ranks), so tests count messages and
bytes (``traffic``) and tutorials draw the schedule; the traffic ``Barrier`` and ``Split`` make
among themselves is not. A ``Request`` is a pending send
or receive; a completed receive fills a ``Status`` (source, tag, bytes), as mpi4py's do. Steps are logical time (a Lamport clock): each
completed blocking call (Send, Recv, Sendrecv, Wait, Waitall) moves its rank one step on, and a
received message also moves it to at least one step after the message's send step. A message sent
at step s is drawn from (s, source) to (arrival, dest).

Deadlocks are found exactly: when every rank that has not finished is blocked waiting for
something no one can deliver, ``simulate`` raises ``DeadlockError`` listing what each rank waits
on. A rank that never blocks nor finishes (say, spinning on ``Test``) is stopped by ``timeout``.
Either error keeps the messages sent before it in ``exc.messages``.
An exception in one rank's ``fn`` is re-raised by ``simulate`` (with a note naming the rank).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

# ----------------------------------------------------------------------------- what the ranks hand each other
# The values MPICH gives them (mpi4py on MPICH has the same).
ANY_SOURCE = -2
ANY_TAG = -1


@dataclass
class Message:
    """One point-to-point message: sent at logical ``step``, received at logical ``arrival``."""

    step: int
    source: int
    dest: int
    tag: int
    nbytes: int
    arrival: int | None = None
    data: bytes | None = None  # the bytes sent, when simulate(..., record_data=True)


class Status:
    """The part of MPI.Status a receiver asks for: who sent, with what tag, how many bytes."""

    def __init__(self) -> None:
        self.source, self.tag, self.count = ANY_SOURCE, ANY_TAG, 0

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_count(self) -> int:
        """Bytes received (mpi4py's default datatype for Get_count is MPI.BYTE)."""
        return self.count


class Request:
    """A pending send or receive; complete it with Wait, Test or Request.Waitall."""

    def __init__(self, world: _World, owner: int, kind: str, call: str, peer: int, tag: int, buf: np.ndarray, context):
        self.world, self.owner, self.kind, self.call = world, owner, kind, call
        self.peer, self.tag, self.buf, self.context = peer, tag, buf, context
        self.done = False
        self.error: Exception | None = None
        self.message: Message | None = None  # the message sent or taken
        self.group: tuple[int, ...] | None = None  # the communicator's world ranks, to report the source in
        self.finished = False  # completion seen by the owner (clock moved on)

    def Wait(self, status: Status | None = None) -> bool:
        self.world.wait(self.owner, [self])
        _fill(status, self)
        return True

    def Test(self, status: Status | None = None) -> bool:
        if not self.world.test(self.owner, self):
            return False
        _fill(status, self)
        return True

    @staticmethod
    def Waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        requests = list(requests)
        if requests:
            requests[0].world.wait(requests[0].owner, requests)
        for i, request in enumerate(requests):
            _fill(statuses[i] if statuses else None, request)
        return True

    def describe(self) -> str:
        if self.kind == "send":
            return f"{self.call}(dest={self.peer}, tag={self.tag}, {self.buf.size} bytes) not yet received"
        src = "ANY_SOURCE" if self.peer == ANY_SOURCE else self.peer
        tag = "ANY_TAG" if self.tag == ANY_TAG else self.tag
        return f"{self.call}(source={src}, tag={tag}, buffer of {self.buf.size} bytes) with no matching send"


def _fill(status: Status | None, request: Request) -> None:
    if status is not None and request.kind == "recv" and request.message is not None:
        source = request.message.source
        if request.group is not None:
            source = request.group.index(source)  # the sender's rank in the receiver's communicator
        status.source, status.tag, status.count = source, request.message.tag, request.message.nbytes


def _as_bytes(buf: Any, writable: bool, what: str) -> np.ndarray:
    """A flat uint8 view of a contiguous buffer (no copy)."""
    if isinstance(buf, (list, tuple)):
        raise TypeError(
            f"{what}: the simulated communicator takes plain buffers (NumPy arrays), not [buffer, datatype] specs"
        )
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what}: buffer must be C-contiguous, got strides {arr.strides}")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what}: receive buffer is read-only")
    return arr.reshape(-1).view(np.uint8)


# ----------------------------------------------------------------------------- the world of P threads
_P2P, _COLLECTIVE = 0, 1  # MPI keeps collective traffic in a context apart from point-to-point


class DeadlockError(RuntimeError):
    """No simulated rank can make progress; the message says what each one waits on."""


class _Abort(BaseException):
    """Raised inside rank threads to unwind them after a deadlock, a timeout or another rank's failure."""


class _World:
    """The state all simulated ranks share, guarded by one lock."""

    def __init__(self, nprocs: int, record_data: bool = False):
        self.size, self.record_data = nprocs, record_data
        self.lock = threading.Lock()
        self.wakeup = [threading.Condition(self.lock) for _ in range(nprocs)]
        self.unexpected: list[list[Request]] = [[] for _ in range(nprocs)]  # sends not yet matched, per dest
        self.posted: list[list[Request]] = [[] for _ in range(nprocs)]  # receives not yet matched, per owner
        self.clock = [0] * nprocs
        self.waiting: list[list[Request] | None] = [None] * nprocs  # what a blocked rank waits for
        self.finished = [False] * nprocs
        self.messages: list[Message] = []
        self.abort_reason: str | None = None

    # -- posting and matching ---------------------------------------------------------------------
    def post(self, request: Request) -> Request:
        with self.lock:
            self._check_abort()
            if request.kind == "send":
                request.message = Message(
                    self.clock[request.owner], request.owner, request.peer, request.tag, request.buf.size
                )
                if request.context == _P2P or request.context > _COLLECTIVE:  # user traffic, on any Dup or Split
                    self.messages.append(request.message)
                    if self.record_data:
                        request.message.data = request.buf.tobytes()
                queue, mine = self.posted[request.peer], self.unexpected[request.peer]
                match = next((r for r in queue if _matches(r, request)), None)
            else:
                queue, mine = self.unexpected[request.owner], self.posted[request.owner]
                match = next((s for s in queue if _matches(request, s)), None)
            if match is None:
                mine.append(request)
            else:
                queue.remove(match)
                self._deliver(*((request, match) if request.kind == "send" else (match, request)))
        return request

    def _deliver(self, send: Request, recv: Request) -> None:
        n = send.buf.size
        if n > recv.buf.size:
            recv.error = ValueError(
                f"message truncated (MPI_ERR_TRUNCATE): rank {recv.owner} received {n} bytes from rank {send.owner} "
                f"(tag {send.tag}) into a buffer of {recv.buf.size} bytes"
            )
        else:
            recv.buf[:n] = send.buf
        recv.message = send.message
        send.done = recv.done = True
        self.wakeup[send.owner].notify()
        self.wakeup[recv.owner].notify()

    # -- completing ---------------------------------------------------------------------------------
    def wait(self, rank: int, requests: list[Request]) -> None:
        with self.lock:
            while not all(r.done for r in requests):
                self._check_abort()
                self.waiting[rank] = requests
                self._detect_deadlock()
                self._check_abort()
                self.wakeup[rank].wait()
                self.waiting[rank] = None
            self._complete(rank, requests)

    def test(self, rank: int, request: Request) -> bool:
        with self.lock:
            self._check_abort()
            if request.done:
                self._complete(rank, [request])
            return request.done

    def _complete(self, rank: int, requests: list[Request]) -> None:
        """Move the rank's clock on: one step, and past the send step of every message it received."""
        fresh = [r for r in requests if not r.finished]
        if not fresh:
            return
        clock = self.clock[rank] + 1
        for r in fresh:
            if r.kind == "recv" and r.message is not None:
                clock = max(clock, r.message.step + 1)
        self.clock[rank] = clock
        for r in fresh:
            r.finished = True
            if r.kind == "recv" and r.message is not None:
                r.message.arrival = clock
        for r in fresh:
            if r.error is not None:
                raise r.error

    # -- failure modes ------------------------------------------------------------------------------
    def _check_abort(self) -> None:
        if self.abort_reason is not None:
            raise _Abort(self.abort_reason)

    def _detect_deadlock(self) -> None:
        """Called with the lock held: if no live rank can move, abort everyone and say why."""
        for rank in range(self.size):
            if self.finished[rank]:
                continue
            waiting = self.waiting[rank]
            if waiting is None or all(r.done for r in waiting):
                return  # this rank is running, or about to wake up
        self.abort(self.report("deadlock: no simulated rank can make progress"))

    def report(self, headline: str) -> str:
        lines = [headline]
        for rank in range(self.size):
            if self.finished[rank]:
                state = "finished"
            elif self.waiting[rank] is None:
                unmatched = [r for r in self.posted[rank]] + [s for q in self.unexpected for s in q if s.owner == rank]
                state = "running (not blocked in a communication call)"
                if unmatched:  # a rank polling with Test: what it polls for
                    state += "; pending: " + "; ".join(r.describe() for r in unmatched[:4])
            else:
                pending = [r.describe() for r in self.waiting[rank] or () if not r.done]
                state = "blocked in " + "; ".join(pending)
            lines.append(f"  rank {rank} (step {self.clock[rank]}): {state}")
        return "\n".join(lines)

    def abort(self, reason: str) -> None:
        if self.abort_reason is None:
            self.abort_reason = reason
        for cond in self.wakeup:
            cond.notify_all()

    def finish(self, rank: int) -> None:
        with self.lock:
            self.finished[rank] = True
            if self.abort_reason is None and not all(self.finished):
                self._detect_deadlock()


def _matches(recv: Request, send: Request) -> bool:
    return recv.context == send.context and recv.peer in (send.owner, ANY_SOURCE) and recv.tag in (send.tag, ANY_TAG)


class SimulatedComm:
    """One rank's view of a simulated world, with mpi4py's names and argument order.

    As in MPI, a communicator is a group and a context: ``group`` lists the world ranks it spans
    (rank i here is world rank group[i]; None: the whole world) and ``context`` keeps its messages
    from matching any other communicator's.
    """

    def __init__(self, world: _World, rank: int, context: int = _P2P, group: Sequence[int] | None = None):
        self._world, self._rank, self._context = world, rank, context  # _rank: the world rank
        self._group = None if group is None else tuple(group)
        self._dups = 0

    def Get_rank(self) -> int:
        return self._rank if self._group is None else self._group.index(self._rank)

    def Get_size(self) -> int:
        return self._world.size if self._group is None else len(self._group)

    def _world_rank(self, peer: int) -> int:
        return peer if self._group is None or peer == ANY_SOURCE else self._group[peer]

    rank = property(Get_rank)
    size = property(Get_size)

    def _check_peer(self, peer: int, what: str, any_ok: bool) -> None:
        if not (0 <= peer < self.Get_size() or (any_ok and peer == ANY_SOURCE)):
            raise ValueError(f"{what}: rank {peer} out of range for a communicator of size {self.Get_size()}")

    def Isend(self, buf: Any, dest: int, tag: int = 0, _call: str = "Isend") -> Request:
        self._check_peer(dest, _call, any_ok=False)
        if tag < 0:
            raise ValueError(f"{_call}: tag must be >= 0, got {tag}")
        data = _as_bytes(buf, writable=False, what=_call)
        return self._post("send", _call, self._world_rank(dest), tag, data)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, _call: str = "Irecv") -> Request:
        self._check_peer(source, _call, any_ok=True)
        data = _as_bytes(buf, writable=True, what=_call)
        return self._post("recv", _call, self._world_rank(source), tag, data)

    def _post(self, kind: str, call: str, peer: int, tag: int, data: np.ndarray) -> Request:
        request = Request(self._world, self._rank, kind, call, peer, tag, data, self._context)
        request.group = self._group
        return self._world.post(request)

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.Isend(buf, dest, tag, _call="Send").Wait()

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> None:
        self.Irecv(buf, source, tag, _call="Recv").Wait(status)

    def Sendrecv(
        self,
        sendbuf: Any,
        dest: int,
        sendtag: int = 0,
        recvbuf: Any = None,
        source: int = ANY_SOURCE,
        recvtag: int = ANY_TAG,
        status: Status | None = None,
    ) -> None:
        if recvbuf is None:
            raise TypeError("Sendrecv: recvbuf is required (buffer-based calls only)")
        recv = self.Irecv(recvbuf, source, recvtag, _call="Sendrecv")
        send = self.Isend(sendbuf, dest, sendtag, _call="Sendrecv")
        Request.Waitall([recv, send])
        _fill(status, recv)

    def Barrier(self) -> None:
        """Dissemination barrier (ceil(log2 P) rounds) in a context of its own, not recorded."""
        barrier, me, p, dist = self._collective(), self.Get_rank(), self.Get_size(), 1
        token, sink = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
        while dist < p:
            barrier.Sendrecv(token, (me + dist) % p, 0, sink, (me - dist) % p, 0)
            dist *= 2

    def _collective(self) -> SimulatedComm:
        """This communicator's ranks in a context apart from its point-to-point traffic."""
        return SimulatedComm(
            self._world, self._rank, _COLLECTIVE if self._context == _P2P else -self._context, self._group
        )

    def Dup(self) -> SimulatedComm:
        """A communicator over the same ranks whose messages never match this one's (a fresh context)."""
        return SimulatedComm(self._world, self._rank, self._new_context(), self._group)

    Clone = Dup

    def _new_context(self) -> int:
        # every rank calls Dup/Split in the same order (they are collective), so the ids agree
        self._dups += 1
        return (self._context + 1) * 1000 + self._dups

    def Split(self, color: int = 0, key: int = 0) -> SimulatedComm:
        """MPI_Comm_split: the ranks passing the same ``color`` form a new communicator, ranked by
        (``key``, rank here). Collective: every rank of this communicator calls it."""
        if color < 0:
            raise ValueError(f"Split: color must be >= 0 (MPI_UNDEFINED is not supported), got {color}")
        # ring allgather of (color, key) in the collective context
        coll, me, p = self._collective(), self.Get_rank(), self.Get_size()
        table = np.zeros((p, 2), dtype=np.int64)
        table[me] = color, key
        for d in range(1, p):
            got = np.zeros(2, dtype=np.int64)
            coll.Sendrecv(table[me].copy(), (me + d) % p, 1, got, (me - d) % p, 1)
            table[(me - d) % p] = got
        members = sorted((int(k), r) for r, (c, k) in enumerate(table) if c == color)
        group = [self._world_rank(r) for _, r in members]
        return SimulatedComm(self._world, self._rank, self._new_context(), group)

    def Free(self) -> None:
        pass


class SimulationResult(list):
    """The per-rank return values of ``fn``, plus the record of every point-to-point message."""

    messages: list[Message]
    steps: list[int]  # each rank's final logical clock

    @property
    def rounds(self) -> int:
        """Length of the schedule in steps: the latest final clock."""
        return max(self.steps, default=0)


def traffic(messages: Sequence[Message], nprocs: int, exclude_tags: Sequence[int] = ()) -> tuple[list, list]:
    """Messages sent and bytes sent by each rank."""
    count, nbytes = [0] * nprocs, [0] * nprocs
    for m in messages:
        if m.tag not in exclude_tags:
            count[m.source] += 1
            nbytes[m.source] += m.nbytes
    return count, nbytes


def recorded(comm: SimulatedComm) -> int:
    """How many messages the world of an in-process communicator has recorded so far."""
    return len(comm._world.messages)


def _with_record(exc: Exception, world: _World) -> Exception:
    """A deadlock or timeout keeps the messages sent before it (``exc.messages``), for a report to draw."""
    exc.messages = list(world.messages)  # type: ignore[attr-defined]
    return exc


def simulate(
    nprocs: int, fn: Callable[..., Any], *args: Any, timeout: float = 60.0, record_data: bool = False
) -> SimulationResult:
    """Run ``fn(comm, *args)`` on ``nprocs`` simulated ranks; return the list of their results.

    With ``record_data`` every recorded message keeps a copy of its bytes (``Message.data``).

    Raises the first exception any rank raised, ``DeadlockError`` if the ranks deadlock, and
    ``TimeoutError`` (with each rank's state) if they are still running after ``timeout`` seconds.
    """
    if not isinstance(nprocs, (int, np.integer)) or nprocs < 1:
        raise ValueError(f"simulate: nprocs must be a positive integer, got {nprocs!r}")
    world = _World(int(nprocs), record_data)
    results: list[Any] = [None] * nprocs
    failures: list[tuple[int, BaseException]] = []

    def run(rank: int) -> None:
        try:
            results[rank] = fn(SimulatedComm(world, rank), *args)
        except _Abort:
            pass
        except BaseException as exc:  # noqa: BLE001  (re-raised by simulate on the caller's thread)
            with world.lock:
                failures.append((rank, exc))
                world.abort_reason = world.abort_reason or f"rank {rank} raised {type(exc).__name__}"
                for cond in world.wakeup:
                    cond.notify_all()
        finally:
            world.finish(rank)

    threads = [threading.Thread(target=run, args=(r,), name=f"sim-rank-{r}", daemon=True) for r in range(nprocs)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + timeout
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    if any(t.is_alive() for t in threads):
        with world.lock:
            reason = world.report(f"timeout: simulated ranks still running after {timeout} s")
            world.abort(reason)
        for t in threads:
            t.join(1.0)
        raise _with_record(TimeoutError(reason), world)
    if failures:
        rank, exc = failures[0]
        if hasattr(exc, "add_note"):  # Python 3.11+
            exc.add_note(f"(raised on simulated rank {rank} of {nprocs})")
        raise exc
    if world.abort_reason is not None:
        raise _with_record(DeadlockError(world.abort_reason), world)
    out = SimulationResult(results)
    out.messages = world.messages
    out.steps = list(world.clock)
    return out
