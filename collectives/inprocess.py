"""A communicator you can hold in your hand: P ranks as threads of one process.

``simulate(P, fn, *args)`` runs ``fn(comm, *args)`` on P threads, each with a ``SimulatedComm``
that speaks mpi4py's point-to-point surface: ``Get_rank``/``Get_size`` and the ``rank``/``size``
properties; buffer calls ``Send``, ``Recv``, ``Sendrecv``, ``Sendrecv_replace``, ``Isend``, ``Irecv``,
``Ssend``, ``Issend`` (on NumPy arrays, or mpi4py's specs ``[buf, MPI.DOUBLE]`` and ``[buf, count, MPI.DOUBLE]``);
object calls ``send``, ``recv``, ``isend``, ``irecv``, ``sendrecv`` (an object is deep-copied, as
if pickled and loaded, but nothing is pickled); requests with ``Wait``/``wait``, ``Test``/``test``
and ``Request.Waitall``/``waitall``/``Waitany``/``Testall``; ``Probe``/``Iprobe``/``probe``/``iprobe``
filling a ``Status``; ``Barrier``/``barrier``, ``Dup``, ``Split``, ``Free``; ``ANY_SOURCE``,
``ANY_TAG`` and ``PROC_NULL``. Any other mpi4py name raises ``NotOffered`` (an AttributeError) that
says so, so a caller can tell "the in-process ranks lack it" from "your code misspelt it".

Semantics follow MPI:
- Matching: a receive takes the first pending message with its source and tag (``ANY_SOURCE``,
  ``ANY_TAG`` match anything); messages between two ranks are non-overtaking; receives are matched
  in the order they were posted.
- Sends are synchronous (MPI_Ssend): a send completes only once a receive has taken it. Real MPI
  may buffer short messages, but a program correct here is correct under any MPI; one that relies
  on buffering deadlocks here, as it would under MPI for long messages.
- A message longer than the receive buffer is an error (MPI_ERR_TRUNCATE, ``TruncationError``),
  raised by the receiver.
- What MPI leaves undefined and real MPI suffers from is recorded as a ``Violation`` (``violations``),
  with the user's file and line: a send buffer written before its request completed (the receiver
  gets the bytes as they were at the post, as an eager MPI would send them), and a send and a
  receive of one rank over the same bytes while both are pending (``np.shares_memory``: receiving
  into another slice of the array one sends from is legal). ``open_requests(comm)`` lists the
  requests a rank has not completed (a request must be completed by Wait or Test).

Every point-to-point message is recorded (``Message``: step, source, dest, tag, bytes, arrival),
on the world and on any ``Dup`` or ``Split`` of it (with world ranks), so tests count messages and
bytes (``traffic``) and tutorials draw the schedule; the traffic ``Barrier`` and ``Split`` make
among themselves is not. Steps are logical time (a Lamport clock): each completed blocking call
(Send, Recv, Sendrecv, Wait, Waitall) moves its rank one step on, and a received message also
moves it to at least one step after the message's send step. A message sent at step s is drawn
from (s, source) to (arrival, dest).

Deadlocks are found exactly: when every rank that has not finished is blocked waiting for
something no one can deliver, ``simulate`` raises ``DeadlockError`` listing what each rank waits
on. A rank that never blocks nor finishes (say, spinning on ``Test``) is stopped by ``timeout``.
Either error keeps the messages sent before it in ``exc.messages``.
An exception in one rank's ``fn`` is re-raised by ``simulate`` (with a note naming the rank).
"""

from __future__ import annotations

import copy
import os
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.communicators import NonblockingSendrecv

# ----------------------------------------------------------------------------- what the ranks hand each other
# The values MPICH gives them (mpi4py on MPICH has the same).
ANY_SOURCE = -2
ANY_TAG = -1
PROC_NULL = -1
POLL_YIELD = 1e-4  # seconds a Test or Iprobe that finds nothing gives the other ranks' threads


class NotOffered(AttributeError):
    """An mpi4py name the in-process ranks do not offer (``name``: e.g. 'comm.Alltoallw')."""

    def __init__(self, name: str):
        super().__init__(
            f"your code calls {name}, which the in-process ranks do not offer; check it under mpiexec with --mpi"
        )
        self.name = name


class TruncationError(ValueError):
    """A message longer than the receive buffer (MPI_ERR_TRUNCATE)."""


@dataclass
class Violation:
    """Something MPI leaves undefined that one rank did: ``property`` names it, ``where`` is the user's line."""

    property: str
    rank: int
    text: str
    where: str = ""

    def __str__(self) -> str:
        return f"{self.text}" + (f", at {self.where}" if self.where else "")


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


_HERE = os.path.dirname(os.path.abspath(__file__))
_KIT = tuple(os.path.join(_HERE, name) for name in ("inprocess.py", "communicators.py", "kit" + os.sep))


def kit_frame(filename: str) -> bool:
    """Whether a frame's file is the in-process ranks' or the kit's own (never the user's line)."""
    return os.path.abspath(filename).startswith(_KIT)


def caller() -> str:
    """'file:line' of the innermost frame outside this module and the kit: the user's call."""
    frame = sys._getframe(1)
    while frame is not None:
        if not kit_frame(frame.f_code.co_filename):
            return f"{frame.f_code.co_filename}:{frame.f_lineno}"
        frame = frame.f_back  # type: ignore[assignment]
    return ""


class Status:
    """MPI.Status as a receiver asks it: who sent, with what tag, how many bytes."""

    def __init__(self) -> None:
        self.source, self.tag, self.count, self.error = ANY_SOURCE, ANY_TAG, 0, 0

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_error(self) -> int:
        return self.error

    def Get_count(self, datatype: Any = None) -> int:
        """Bytes received, or elements of ``datatype`` (mpi4py's default datatype for Get_count is MPI.BYTE)."""
        return self.count if datatype is None else self.count // _itemsize(datatype)

    Get_elements = Get_count


def _itemsize(datatype: Any) -> int:
    """The size in bytes of an mpi4py datatype, the kit's stand-in for one, or a NumPy dtype."""
    for get in (lambda d: d.Get_size(), lambda d: d.itemsize, lambda d: np.dtype(d).itemsize):
        try:
            return int(get(datatype))
        except Exception:  # noqa: BLE001, S112  (try the next way of asking)
            continue
    raise TypeError(f"{datatype!r} is not a datatype (expected e.g. MPI.DOUBLE)")


class Request:
    """A pending send or receive; complete it with Wait, Test or Request.Waitall (or their lower-case forms)."""

    def __init__(self, world: _World, owner: int, kind: str, call: str, peer: int, tag: int, buf: Any, context: int):
        self.world, self.owner, self.kind, self.call = world, owner, kind, call
        self.peer, self.tag, self.buf, self.context = peer, tag, buf, context
        self.done = False
        self.error: Exception | None = None
        self.message: Message | None = None  # the message sent or taken
        self.group: tuple[int, ...] | None = None  # the communicator's world ranks, to report the source in
        self.finished = False  # completion seen by the owner (clock moved on)
        self.where = ""  # the user's line that made it
        self.sent: np.ndarray | None = None  # a nonblocking send's bytes as they were at the post
        self.obj: Any = None  # an object message's (deep-copied) object
        self.objects = False  # an object (lower-case) call
        self.itemsize = 1  # a receive's element size: a message of another type may not fill whole elements

    # -- MPI's names -----------------------------------------------------------------------------
    def Wait(self, status: Status | None = None) -> bool:
        self.world.wait(self.owner, [self])
        _fill(status, self)
        return True

    def wait(self, status: Status | None = None) -> Any:
        """mpi4py's lower case: the received object (None for a send)."""
        self.Wait(status)
        return self.obj if self.kind == "recv" else None

    def Test(self, status: Status | None = None) -> bool:
        if not self.world.test(self.owner, [self]):
            return False
        _fill(status, self)
        return True

    def test(self, status: Status | None = None) -> tuple[bool, Any]:
        done = self.Test(status)
        return done, (self.obj if done and self.kind == "recv" else None)

    def Free(self) -> None:
        self.world.forget(self)

    def Get_status(self, status: Status | None = None) -> bool:
        if self.done:
            _fill(status, self)
        return self.done

    @staticmethod
    def Waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        requests = [r for r in requests if r is not None]
        if requests:
            requests[0].world.wait(requests[0].owner, requests)
        for i, request in enumerate(requests):
            _fill(statuses[i] if statuses else None, request)
        return True

    @staticmethod
    def waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> list[Any]:
        Request.Waitall(requests, statuses)
        return [r.obj if r.kind == "recv" else None for r in requests]

    @staticmethod
    def Waitany(requests: Sequence[Request], status: Status | None = None) -> int:
        requests = list(requests)
        if not requests:
            return -32766  # MPI_UNDEFINED
        i = requests[0].world.wait_any(requests[0].owner, requests)
        _fill(status, requests[i])
        return i

    @staticmethod
    def waitany(requests: Sequence[Request], status: Status | None = None) -> tuple[int, Any]:
        i = Request.Waitany(requests, status)
        return i, (requests[i].obj if requests[i].kind == "recv" else None)

    @staticmethod
    def Testall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        requests = list(requests)
        if requests and not requests[0].world.test(requests[0].owner, requests):
            return False
        for i, request in enumerate(requests):
            _fill(statuses[i] if statuses else None, request)
        return True

    @staticmethod
    def testall(requests: Sequence[Request], statuses: list[Status] | None = None) -> tuple[bool, list[Any] | None]:
        if not Request.Testall(requests, statuses):
            return False, None
        return True, [r.obj if r.kind == "recv" else None for r in requests]

    def __getattr__(self, name: str) -> Any:
        raise _missing("Request", name)

    def describe(self) -> str:
        size = "an object" if self.objects else f"{self.buf.size} bytes"
        if self.kind == "send":
            return f"{self.call}(dest={self.peer}, tag={self.tag}, {size}) not yet received"
        src = "ANY_SOURCE" if self.peer == ANY_SOURCE else self.peer
        tag = "ANY_TAG" if self.tag == ANY_TAG else self.tag
        into = "an object" if self.objects else f"buffer of {self.buf.size} bytes"
        return f"{self.call}(source={src}, tag={tag}, {into}) with no matching send"


class _AnyOf:
    """What a rank in Waitany waits for: any one of its requests."""

    def __init__(self, requests: list[Request]):
        self.requests = requests

    @property
    def done(self) -> bool:
        return any(r.done for r in self.requests)

    def describe(self) -> str:
        return "any of: " + "; ".join(r.describe() for r in self.requests if not r.done)


class _Probe:
    """What a rank in Probe waits for: a message it could receive, not yet received."""

    def __init__(self, world: _World, rank: int, source: int, tag: int, context: int, call: str):
        self.world, self.owner, self.peer, self.tag, self.context, self.call = world, rank, source, tag, context, call
        self.kind, self.objects = "recv", False

    def match(self) -> Request | None:
        return next((s for s in self.world.unexpected[self.owner] if _matches(self, s)), None)

    @property
    def done(self) -> bool:
        return self.match() is not None

    def describe(self) -> str:
        src = "ANY_SOURCE" if self.peer == ANY_SOURCE else self.peer
        return f"{self.call}(source={src}, tag={'ANY_TAG' if self.tag == ANY_TAG else self.tag}) with no message"


_MPI4PY_NAMES: dict[str, set[str]] = {}


def _missing(kind: str, name: str) -> AttributeError:
    """NotOffered for an mpi4py name of ``kind`` (Comm, Request) this module lacks; a plain AttributeError else."""
    if not _MPI4PY_NAMES:
        try:
            from mpi4py import MPI

            _MPI4PY_NAMES.update(Comm=set(dir(MPI.Intracomm)), Request=set(dir(MPI.Request)), MPI=set(dir(MPI)))
        except ImportError:  # pragma: no cover  (mpi4py is a dependency)
            _MPI4PY_NAMES.update(Comm=set(), Request=set(), MPI=set())
    if name.startswith("__") or name not in _MPI4PY_NAMES.get(kind, set()):
        return AttributeError(f"'{kind}' object has no attribute '{name}'")
    return NotOffered(f"{'comm' if kind == 'Comm' else kind}.{name}")


def _fill(status: Status | None, request: Request) -> None:
    if status is not None and request.kind == "recv" and request.message is not None:
        source = request.message.source
        if request.group is not None and source in request.group:
            source = request.group.index(source)  # the sender's rank in the receiver's communicator
        status.source, status.tag, status.count = source, request.message.tag, request.message.nbytes


def element_size(buf: Any) -> int:
    """The size of one element of a buffer or buffer spec: its datatype's, or its array's itemsize."""
    if isinstance(buf, (list, tuple)) and buf:
        return _itemsize(buf[-1])
    return buf.itemsize if isinstance(buf, np.ndarray) else 1


def _as_bytes(buf: Any, writable: bool, what: str) -> np.ndarray:
    """A flat uint8 view of a contiguous buffer (no copy); mpi4py's ``[buf, datatype]`` and
    ``[buf, count, datatype]`` (or ``[buf, (count, displacement), datatype]``) specs select their bytes."""
    count, displ, size = None, 0, 1
    if isinstance(buf, (list, tuple)):
        if len(buf) not in (2, 3):
            raise TypeError(f"{what}: a buffer spec is [buf, datatype] or [buf, count, datatype], got {len(buf)} items")
        size = _itemsize(buf[-1])
        if len(buf) == 3:
            count, displ = (buf[1], 0) if np.ndim(buf[1]) == 0 else buf[1]
        buf = buf[0]
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what}: buffer must be C-contiguous, got strides {arr.strides}")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what}: receive buffer is read-only")
    flat = arr.reshape(-1).view(np.uint8)
    if count is None:
        return flat
    lo, hi = int(displ) * size, (int(displ) + int(count)) * size
    if hi > flat.size:
        raise ValueError(
            f"{what}: the spec asks for {count} elements of {size} bytes, the buffer has {flat.size} bytes"
        )
    return flat[lo:hi]


def _object_bytes(obj: Any) -> int:
    """An object message's size for the record: its arrays' bytes (nothing is pickled to measure it)."""
    if isinstance(obj, np.ndarray):
        return int(obj.nbytes)
    if isinstance(obj, (bytes, bytearray)):
        return len(obj)
    if isinstance(obj, (list, tuple)):
        return sum(_object_bytes(x) for x in obj)
    if isinstance(obj, dict):
        return sum(_object_bytes(x) for x in obj.values())
    return 8


# ----------------------------------------------------------------------------- the world of P threads
_P2P, _COLLECTIVE = 0, 1  # MPI keeps collective traffic in a context apart from point-to-point


class DeadlockError(RuntimeError):
    """No simulated rank can make progress; the message says what each one waits on."""


class _Abort(BaseException):
    """Raised inside rank threads to unwind them after a deadlock, a timeout or another rank's failure."""


def _user(context: int) -> bool:
    return context == _P2P or context > _COLLECTIVE  # user traffic, on the world or any Dup or Split


class _World:
    """The state all simulated ranks share, guarded by one lock."""

    def __init__(self, nprocs: int, record_data: bool = False):
        self.size, self.record_data = nprocs, record_data
        self.lock = threading.Lock()
        self.wakeup = [threading.Condition(self.lock) for _ in range(nprocs)]
        self.unexpected: list[list[Request]] = [[] for _ in range(nprocs)]  # sends not yet matched, per dest
        self.posted: list[list[Request]] = [[] for _ in range(nprocs)]  # receives not yet matched, per owner
        self.open: list[list[Request]] = [[] for _ in range(nprocs)]  # the user's requests not yet completed
        self.clock = [0] * nprocs
        self.waiting: list[list[Any] | None] = [None] * nprocs  # what a blocked rank waits for
        self.finished = [False] * nprocs
        self.messages: list[Message] = []
        self.violations: list[Violation] = []
        self.abort_reason: str | None = None

    # -- posting and matching ---------------------------------------------------------------------
    def post(self, request: Request) -> Request:
        with self.lock:
            self._check_abort()
            if _user(request.context):
                self._aliasing(request)
                self.open[request.owner].append(request)
            if request.kind == "send":
                nbytes = _object_bytes(request.obj) if request.objects else request.buf.size
                request.message = Message(self.clock[request.owner], request.owner, request.peer, request.tag, nbytes)
                if _user(request.context):
                    self.messages.append(request.message)
                    if self.record_data and not request.objects:
                        request.message.data = request.buf.tobytes()
                queue, mine = self.posted[request.peer], self.unexpected[request.peer]
                match = next((r for r in queue if _matches(r, request)), None)
            else:
                queue, mine = self.unexpected[request.owner], self.posted[request.owner]
                match = next((s for s in queue if _matches(request, s)), None)
            if match is None:
                mine.append(request)
                if request.kind == "send":
                    self.wakeup[request.peer].notify()  # a rank in Probe may be waiting for it
            else:
                queue.remove(match)
                self._deliver(*((request, match) if request.kind == "send" else (match, request)))
        return request

    def _aliasing(self, request: Request) -> None:
        """A send and a receive of one rank, both pending, over the same bytes: MPI leaves the result undefined."""
        if request.objects:
            return
        for other in self.open[request.owner]:
            if other.kind != request.kind and not other.objects and np.shares_memory(other.buf, request.buf):
                send, recv = (request, other) if request.kind == "send" else (other, request)
                self.violations.append(
                    Violation(
                        "no-aliasing", request.owner,
                        f"rank {request.owner} sends from and receives into the same memory at once: "
                        f"{send.call}(dest={send.peer}) and {recv.call}(source={recv.peer}) share bytes",
                        request.where,
                    )
                )  # fmt: skip
                return

    def _deliver(self, send: Request, recv: Request) -> None:
        if send.objects != recv.objects:
            sent, got = ("an object", "a buffer") if send.objects else ("a buffer", "an object")
            recv.error = TypeError(
                f"rank {recv.owner}'s {recv.call} receives {got} but rank {send.owner} sent {sent} with {send.call} "
                "(mpi4py's lower-case calls move pickled objects, the upper-case ones buffers: use one pair)"
            )
        elif send.objects:
            recv.obj = send.obj
        else:
            data = send.sent if send.sent is not None else send.buf
            self._written(send)
            n = data.size
            if n > recv.buf.size:
                recv.error = TruncationError(
                    f"message truncated (MPI_ERR_TRUNCATE): rank {recv.owner} received {n} bytes from rank "
                    f"{send.owner} (tag {send.tag}) into a buffer of {recv.buf.size} bytes"
                )
            else:
                recv.buf[:n] = data
                if n % recv.itemsize:
                    self.violations.append(type_mismatch(recv.owner, n, recv.itemsize, send.owner, recv.where))
        recv.message = send.message
        send.done = recv.done = True
        self.wakeup[send.owner].notify()
        self.wakeup[recv.owner].notify()

    def _written(self, send: Request) -> None:
        """A nonblocking send's buffer must hold its bytes until the request completes."""
        if send.sent is not None and not np.array_equal(send.sent, send.buf):
            self.violations.append(
                Violation(
                    "send-buffer-untouched", send.owner,
                    f"rank {send.owner} wrote into the buffer of its {send.call}(dest={send.peer}, tag={send.tag}) "
                    "before the request completed (MPI may send the bytes at any time until Wait)",
                    send.where,
                )
            )  # fmt: skip
            send.sent = None  # said once

    # -- completing ---------------------------------------------------------------------------------
    def wait(self, rank: int, requests: Sequence[Any]) -> None:
        with self.lock:
            while not all(r.done for r in requests):
                self._block(rank, list(requests))
            self._complete(rank, requests)

    def wait_any(self, rank: int, requests: list[Request]) -> int:
        with self.lock:
            while not any(r.done for r in requests):
                self._block(rank, [_AnyOf(requests)])
            i = next(i for i, r in enumerate(requests) if r.done)
            self._complete(rank, [requests[i]])
            return i

    def probe(self, rank: int, probe: _Probe, block: bool) -> Request | None:
        with self.lock:
            self._check_abort()
            while block and not probe.done:
                self._block(rank, [probe])
            found = probe.match()
        if found is None:
            time.sleep(POLL_YIELD)
        return found

    def _block(self, rank: int, waits: list[Any]) -> None:
        self._check_abort()
        self.waiting[rank] = waits
        self._detect_deadlock()
        self._check_abort()
        self.wakeup[rank].wait()
        self.waiting[rank] = None

    def test(self, rank: int, requests: Sequence[Request]) -> bool:
        with self.lock:
            self._check_abort()
            done = all(r.done for r in requests)
            if done:
                self._complete(rank, requests)
        if not done:
            time.sleep(POLL_YIELD)  # a rank polling in a loop lets the others run (the threads share one GIL)
        return done

    def forget(self, request: Request) -> None:
        with self.lock:
            if request in self.open[request.owner]:
                self.open[request.owner].remove(request)

    def _complete(self, rank: int, requests: Sequence[Request]) -> None:
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
            if r in self.open[rank]:
                self.open[rank].remove(r)
            if r.kind == "recv" and r.message is not None:
                r.message.arrival = clock
            if r.kind == "send":
                self._written(r)
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
                where = {r.where for r in self.waiting[rank] or () if getattr(r, "where", "")}
                state = "blocked in " + "; ".join(pending) + (f" (at {', '.join(sorted(where))})" if where else "")
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


def type_mismatch(rank: int, nbytes: int, itemsize: int, source: int, where: str) -> Violation:
    """A message that does not fill whole elements of the receive: the sender sent another type."""
    return Violation(
        "truncation", rank,
        f"rank {rank} received {nbytes} bytes from rank {source} into elements of {itemsize} bytes: the types of "
        "the send and the receive differ (MPI requires them to match; MPICH aborts the job)",
        where,
    )  # fmt: skip


def _matches(recv: Any, send: Request) -> bool:
    return recv.context == send.context and recv.peer in (send.owner, ANY_SOURCE) and recv.tag in (send.tag, ANY_TAG)


class SimulatedComm(NonblockingSendrecv):
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
        return peer if self._group is None or peer in (ANY_SOURCE, PROC_NULL) else self._group[peer]

    rank = property(Get_rank)
    size = property(Get_size)

    def __getattr__(self, name: str) -> Any:
        raise _missing("Comm", name)

    def _check_peer(self, peer: Any, what: str, any_ok: bool) -> None:
        if not isinstance(peer, (int, np.integer)) or isinstance(peer, bool):
            raise TypeError(f"{what}: a rank must be an int, got {peer!r}")
        if not (0 <= peer < self.Get_size() or peer == PROC_NULL or (any_ok and peer == ANY_SOURCE)):
            raise ValueError(f"{what}: rank {peer} out of range for a communicator of size {self.Get_size()}")

    # -- buffers (upper case) -------------------------------------------------------------------------
    def Isend(self, buf: Any, dest: int, tag: int = 0, _call: str = "Isend") -> Request:
        self._check_peer(dest, _call, any_ok=False)
        if tag < 0:
            raise ValueError(f"{_call}: tag must be >= 0, got {tag}")
        data = _as_bytes(buf, writable=False, what=_call)
        return self._post("send", _call, dest, tag, data, snapshot=_call in ("Isend", "Issend"))

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, _call: str = "Irecv") -> Request:
        self._check_peer(source, _call, any_ok=True)
        data = _as_bytes(buf, writable=True, what=_call)
        return self._post("recv", _call, source, tag, data, itemsize=element_size(buf))

    def Issend(self, buf: Any, dest: int, tag: int = 0) -> Request:
        return self.Isend(buf, dest, tag, _call="Issend")

    def _post(self, kind: str, call: str, peer: int, tag: int, data: Any, snapshot: bool = False, obj: Any = None,
              objects: bool = False, itemsize: int = 1) -> Request:  # fmt: skip
        request = Request(self._world, self._rank, kind, call, self._world_rank(peer), tag, data, self._context)
        request.group, request.where, request.objects = self._group, caller(), objects
        request.itemsize = itemsize
        if objects and kind == "send":
            request.obj = copy.deepcopy(obj)  # the receiver gets its own copy, as pickle-and-load would give
        if peer == PROC_NULL:  # MPI: completes at once, moves nothing
            request.done, request.message = True, Message(self._world.clock[self._rank], PROC_NULL, PROC_NULL, tag, 0)
            return request
        if snapshot:
            request.sent = data.copy()
        return self._world.post(request)

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.Isend(buf, dest, tag, _call="Send").Wait()

    Ssend = Send

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> None:
        self.Irecv(buf, source, tag, _call="Recv").Wait(status)

    def _complete(self, recv: Request, send: Request, status: Status | None) -> None:
        """Sendrecv's pair (communicators.NonblockingSendrecv posts it): both at once, as MPI_Sendrecv."""
        Request.Waitall([recv, send])
        _fill(status, recv)

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = ANY_SOURCE,
                         recvtag: int = ANY_TAG, status: Status | None = None) -> None:  # fmt: skip
        """MPI_Sendrecv_replace: send buf, then receive into it (the sent bytes are a copy taken first)."""
        data = _as_bytes(buf, writable=True, what="Sendrecv_replace")
        self.Sendrecv(data.copy(), dest, sendtag, buf, source, recvtag, status)

    # -- objects (lower case): deep-copied, never pickled ------------------------------------------------
    def isend(self, obj: Any, dest: int, tag: int = 0, _call: str = "isend") -> Request:
        self._check_peer(dest, _call, any_ok=False)
        return self._post("send", _call, dest, tag, None, obj=obj, objects=True)

    def irecv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG, _call: str = "irecv") -> Request:
        self._check_peer(source, _call, any_ok=True)
        return self._post("recv", _call, source, tag, None, objects=True)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.isend(obj, dest, tag, _call="send").Wait()

    ssend = send
    issend = isend

    def recv(self, buf: Any = None, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> Any:
        return self.irecv(buf, source, tag, _call="recv").wait(status)

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Status | None = None) -> Any:  # fmt: skip
        recv = self.irecv(recvbuf, source, recvtag, _call="sendrecv")
        send = self.isend(sendobj, dest, sendtag, _call="sendrecv")
        Request.Waitall([recv, send])
        _fill(status, recv)
        return recv.obj

    # -- probing --------------------------------------------------------------------------------------------
    def Iprobe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        return self._probe(source, tag, status, block=False, call="Iprobe")

    def Probe(self, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Status | None = None) -> bool:
        return self._probe(source, tag, status, block=True, call="Probe")

    iprobe = Iprobe
    probe = Probe

    def _probe(self, source: int, tag: int, status: Status | None, block: bool, call: str) -> bool:
        self._check_peer(source, call, any_ok=True)
        probe = _Probe(self._world, self._rank, self._world_rank(source), tag, self._context, call)
        found = self._world.probe(self._rank, probe, block)
        if found is not None and status is not None:
            src = found.owner if self._group is None else self._group.index(found.owner)
            status.source, status.tag = src, found.tag
            status.count = _object_bytes(found.obj) if found.objects else found.buf.size
        return found is not None

    # -- collectives the kit's ranks need, and communicators -----------------------------------------------
    def Barrier(self) -> None:
        """Dissemination barrier (ceil(log2 P) rounds) in a context of its own, not recorded."""
        barrier, me, p, dist = self._collective(), self.Get_rank(), self.Get_size(), 1
        token, sink = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
        while dist < p:
            barrier.Sendrecv(token, (me + dist) % p, 0, sink, (me - dist) % p, 0)
            dist *= 2

    barrier = Barrier

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

    Disconnect = Free


def open_requests(comm: SimulatedComm) -> list[Request]:
    """The requests this rank posted (on any communicator of its world) and has not completed."""
    with comm._world.lock:
        return list(comm._world.open[comm._rank])


def written_after_post(comm: SimulatedComm, requests: Sequence[Request]) -> None:
    """Record a send buffer written since its post, for sends a rank left uncompleted when its call returned."""
    with comm._world.lock:
        for request in requests:
            if request.kind == "send":
                comm._world._written(request)


def violations(comm: SimulatedComm) -> list[Violation]:
    """What the ranks of this communicator's world did that MPI leaves undefined, so far."""
    with comm._world.lock:
        return list(comm._world.violations)


class SimulationResult(list):
    """The per-rank return values of ``fn``, plus the record of every point-to-point message."""

    messages: list[Message]
    steps: list[int]  # each rank's final logical clock
    violations: list[Violation]  # what the ranks did that MPI leaves undefined (see ``Violation``)

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


def _with_record(exc: BaseException, world: _World) -> BaseException:
    """A deadlock or timeout keeps the messages sent before it (``exc.messages``), for a report to draw."""
    exc.messages = list(world.messages)  # type: ignore[attr-defined]
    exc.violations = list(world.violations)  # type: ignore[attr-defined]
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
        raise _with_record(exc, world)
    if world.abort_reason is not None:
        raise _with_record(DeadlockError(world.abort_reason), world)
    out = SimulationResult(results)
    out.messages = world.messages
    out.steps = list(world.clock)
    out.violations = world.violations
    return out
