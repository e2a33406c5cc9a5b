"""No rank waits forever without a word: a communicator whose blocking calls give up after a deadline.

In a collective every rank waits for its partners. If one rank has finished its loop early, taken
another branch, or died without MPI noticing, its partners wait forever and the job hangs in
silence. ``TimeoutComm(comm, seconds)`` wraps a communicator (mpi4py's or a simulated one) and
turns every blocking call into non-blocking requests polled against a deadline::

    Send / Recv / Sendrecv  ->  Isend / Irecv, then Test until done or the deadline passes
    Wait on a request       ->  the same polling
    Barrier, Allreduce      ->  Ibarrier / Iallreduce where the communicator has them
                                (else a dissemination barrier over point-to-point requests)

A rank still waiting when the deadline passes raises ``CommTimeoutError`` naming the call, what it
was doing (``activity``: "DistributedOptimizer.step, step 12"), and the peers it waits for. Under
``dist.run`` the job then ends (MPI_Abort) instead of hanging.

How a rank waits: on an MPI communicator whose node has a core for each of its ranks, it tests without
pause (busy-polling, as MPICH's own blocking calls do: nothing else needs the core, and a sleep would
learn of the partner's arrival late: at p = 2 here the sleeps below cost 1.8-4 ms a step of 38 ms, and
the trainer ran 6% faster on average without them). Where ranks outnumber the cores, on the in-process
communicator, and on a communication thread (the overlap's, which shares the interpreter lock with the
backward), the first tests spin, then the rank sleeps between
tests, 10 us doubling up to 1 ms, which frees the core for the rank that is late.

The library's default is no timeout. ``MINIDL_COMM_TIMEOUT=SECONDS`` in the environment (or
``dist.init(timeout=SECONDS)``) turns it on; ``python -m minidl.train`` turns it on by default
(``DEFAULT_TRAIN_TIMEOUT``). ``0`` or ``off`` turns it off.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from collectives.communicators import NonblockingSendrecv

ENV = "MINIDL_COMM_TIMEOUT"
DEFAULT_TRAIN_TIMEOUT = 300.0  # seconds: python -m minidl.train's default, far above any step of its models
SPINS = 50  # tests before the first sleep
FIRST_PAUSE, MAX_PAUSE = 1e-5, 1e-3  # seconds between tests after the spins: doubling, capped
_BARRIER_TAG = 7401  # the dissemination barrier's tag, on a Dup of the communicator (its own context)

_local = threading.local()


class CommTimeoutError(TimeoutError):
    """A rank waited longer than the communication timeout; the message names the call, the step and the peers."""


def timeout_from_env(default: float | None = None) -> float | None:
    """Seconds from ``MINIDL_COMM_TIMEOUT`` (unset: ``default``; ``0``, ``off``, ``none``: no timeout)."""
    raw = os.environ.get(ENV)
    if raw is None or raw.strip() == "":
        return default
    if raw.strip().lower() in ("0", "off", "none", "no"):
        return None
    try:
        seconds = float(raw)
    except ValueError:
        raise ValueError(f"{ENV}={raw!r}: expected a number of seconds (or 0/off)") from None
    if not seconds > 0 or seconds == float("inf"):
        raise ValueError(f"{ENV}={raw!r}: expected a positive finite number of seconds (or 0/off)")
    return seconds


def train_timeout() -> float | None:
    """The communication timeout of ``python -m minidl.train``: MINIDL_COMM_TIMEOUT, else a few minutes (a step of
    these models takes well under a second; a rank that waits minutes is waiting for a rank that is gone)."""
    return timeout_from_env(DEFAULT_TRAIN_TIMEOUT)


@contextlib.contextmanager
def activity(what: str, step: int | None = None) -> Iterator[None]:
    """Name what this rank is doing (and at which step) for a timeout's message; activities nest."""
    stack = _stack()
    stack.append(what if step is None else f"{what} at step {step}")
    try:
        yield
    finally:
        stack.pop()


def _stack() -> list[str]:
    if not hasattr(_local, "stack"):
        _local.stack = []
    return _local.stack


def unwrap(comm: Any) -> Any:
    """The communicator under any TimeoutComm wrappers."""
    while isinstance(comm, TimeoutComm):
        comm = comm.comm
    return comm


def base_comm(comm: Any) -> Any:
    """The communicator under every wrapper (TimeoutComm, CountingComm's ``inner``): an mpi4py or a simulated
    one, for isinstance checks and for the Status type a receive needs."""
    while True:
        if isinstance(comm, TimeoutComm):
            comm = comm.comm
        elif hasattr(comm, "inner"):
            comm = comm.inner
        else:
            return comm


def with_timeout(comm: Any, seconds: float | None) -> Any:
    """``comm`` wrapped in a TimeoutComm of ``seconds`` (None: ``comm`` itself, unwrapped)."""
    inner = unwrap(comm)
    return inner if seconds is None else TimeoutComm(inner, seconds)


class TimeoutComm(NonblockingSendrecv):
    """``comm`` with a deadline on every blocking call (see the module doc); anything else passes through."""

    def __init__(self, comm: Any, seconds: float):
        if not seconds > 0:
            raise ValueError(f"TimeoutComm: seconds must be > 0, got {seconds}")
        self.comm, self.seconds = comm, float(seconds)
        self._barrier_comm: Any = None
        self._any_source, self._any_tag = _wildcards(comm)
        self.spins = busy_polls(comm)  # tests before the first sleep (module doc)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    # -- point to point
    def Isend(self, buf: Any, dest: int, tag: int = 0, _call: str = "Isend") -> TimedRequest:
        what = f"send to rank {dest} (tag {tag})"
        return TimedRequest(self, self.comm.Isend(buf, dest, tag), _call, what, [dest])

    def Irecv(self, buf: Any, source: int | None = None, tag: int | None = None, _call: str = "Irecv") -> TimedRequest:
        any_source, any_tag = self._any_source, self._any_tag
        source = any_source if source is None else source
        tag = any_tag if tag is None else tag
        what = f"receive from {'any rank' if source == any_source else f'rank {source}'}"
        what += "" if tag == any_tag else f" (tag {tag})"
        return TimedRequest(
            self, self.comm.Irecv(buf, source, tag), _call, what, [] if source == any_source else [source]
        )

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.Isend(buf, dest, tag, _call="Send").Wait()

    def Recv(self, buf: Any, source: int | None = None, tag: int | None = None, status: Any = None) -> None:
        self.Irecv(buf, source, tag, _call="Recv").Wait(status)

    def _complete(self, recv: TimedRequest, send: TimedRequest, status: Any) -> None:  # Sendrecv's two requests
        self.wait([(recv, status), (send, None)], "Sendrecv")

    # -- collectives MPI provides
    def Barrier(self) -> None:
        if callable(getattr(self.comm, "Ibarrier", None)):
            self.wait([(self.comm.Ibarrier(), None)], "Barrier", peers=_all_others(self))
        else:
            self._dissemination_barrier()

    def Allreduce(self, sendbuf: Any, recvbuf: Any, op: Any = None) -> None:
        if not callable(getattr(self.comm, "Iallreduce", None)):
            raise TypeError(f"TimeoutComm: {type(self.comm).__name__} has no Iallreduce")
        args = (sendbuf, recvbuf) if op is None else (sendbuf, recvbuf, op)
        self.wait([(self.comm.Iallreduce(*args), None)], "Allreduce", peers=_all_others(self))

    def _dissemination_barrier(self) -> None:
        """ceil(log2 p) rounds: in round k rank r signals r + 2^k and waits for r - 2^k (Hensgen et al. 1988)."""
        if self._barrier_comm is None:
            self._barrier_comm = TimeoutComm(self.comm.Dup(), self.seconds)
        comm, me, p, d = self._barrier_comm, self.Get_rank(), self.Get_size(), 1
        token, sink = np.zeros(1, np.uint8), np.zeros(1, np.uint8)
        with activity("Barrier"):
            while d < p:
                comm.Sendrecv(token, (me + d) % p, _BARRIER_TAG, sink, (me - d) % p, _BARRIER_TAG)
                d *= 2

    # -- new communicators carry the timeout
    def Dup(self) -> TimeoutComm:
        return TimeoutComm(self.comm.Dup(), self.seconds)

    Clone = Dup

    def Split(self, color: int = 0, key: int = 0) -> TimeoutComm:
        return TimeoutComm(self.comm.Split(color, key), self.seconds)

    # -- the deadline
    def wait(self, pending: Sequence[tuple[Any, Any]], call: str, peers: Sequence[int] | None = None) -> None:
        """Test every (request, status) until all are done; past the deadline raise CommTimeoutError."""
        start = time.monotonic()
        pending, tests, pause = list(pending), 0, FIRST_PAUSE
        # a communication thread (overlap) shares the interpreter lock with the backward: it must not spin
        spins = self.spins if threading.current_thread() is threading.main_thread() else SPINS
        while pending:
            pending = [(r, s) for r, s in pending if not _test(r, s)]
            if not pending:
                return
            tests += 1
            waited = time.monotonic() - start
            if waited > self.seconds:
                raise self._timeout_error(call, waited, pending, peers)
            if tests > spins:
                time.sleep(pause)
                pause = min(2 * pause, MAX_PAUSE)

    def _timeout_error(self, call: str, waited: float, pending: list, peers: Sequence[int] | None) -> CommTimeoutError:
        whats = [r.what if isinstance(r, TimedRequest) else call for r, _ in pending]
        if peers is None:
            peers = sorted({p for r, _ in pending if isinstance(r, TimedRequest) for p in r.peers})
        doing = " > ".join(_stack()) or "a communication call outside any named step"
        peer_text = f"rank{'s' if len(peers) > 1 else ''} {_ranks(peers)}" if peers else "any rank"
        return CommTimeoutError(
            f"rank {self.Get_rank()} of {self.Get_size()}: no progress for {waited:.1f} s ({ENV}={self.seconds:g}) "
            f"in {call} during {doing}, waiting for {peer_text}: {'; '.join(whats)}. A rank may have stopped early, "
            "taken another branch, or died"
        )


class TimedRequest:
    """A request whose ``Wait`` gives up at the communicator's deadline."""

    def __init__(self, owner: TimeoutComm, request: Any, call: str, what: str, peers: list[int]):
        self.owner, self.request, self.call, self.what, self.peers = owner, request, call, what, peers

    def Test(self, status: Any = None) -> bool:
        return _test(self.request, status)

    def Wait(self, status: Any = None) -> bool:
        self.owner.wait([(self, status)], self.call, peers=self.peers)
        return True

    @staticmethod
    def Waitall(requests: Sequence[Any], statuses: list[Any] | None = None) -> bool:
        """Complete all ``requests`` (TimedRequests of one communicator) under its deadline."""
        requests = list(requests)
        if requests:
            pending = [(r, statuses[i] if statuses else None) for i, r in enumerate(requests)]
            requests[0].owner.wait(pending, "Waitall")
        return True

    def __getattr__(self, name: str) -> Any:
        return getattr(self.request, name)


def busy_polls(comm: Any) -> float:
    """How many tests a waiting rank makes before it starts to sleep: without end (busy-polling) on an mpi4py
    communicator when the ranks the launcher put on this node do not outnumber its cores, else ``SPINS``."""
    from minidl.tools.threads import ranks_on_this_node

    if _mpi(comm) is not None and ranks_on_this_node() <= (os.cpu_count() or 1):
        return float("inf")
    return SPINS


def _test(request: Any, status: Any) -> bool:
    if isinstance(request, TimedRequest):
        request = request.request
    return bool(request.Test() if status is None else request.Test(status))


def _mpi(comm: Any) -> Any:
    """mpi4py.MPI if ``comm`` is one of its communicators, else None (an mpi4py communicator means mpi4py.MPI is
    loaded; never load it here)."""
    MPI = sys.modules.get("mpi4py.MPI")
    return MPI if MPI is not None and isinstance(comm, MPI.Comm) else None


def _wildcards(comm: Any) -> tuple[int, int]:
    """(ANY_SOURCE, ANY_TAG) of ``comm``'s kind: mpi4py's (they differ between MPI libraries) or the simulated one's."""
    MPI = _mpi(comm)
    if MPI is not None:
        return MPI.ANY_SOURCE, MPI.ANY_TAG
    from collectives.inprocess import ANY_SOURCE, ANY_TAG

    return ANY_SOURCE, ANY_TAG


def _all_others(comm: Any) -> list[int]:
    return [r for r in range(comm.Get_size()) if r != comm.Get_rank()]


def _ranks(peers: Sequence[int]) -> str:
    return ", ".join(str(p) for p in peers)


# The first rank to end with a failure ends the job: mpiexec kills the others at once. So where every rank prints
# and ends (a mismatch: raised on every rank), or rank 0 prints and every rank ends (a Ctrl-C), the lines must
# be out before any rank leaves, or on a loaded machine a rank a few hundred milliseconds behind is killed
# before its line is: the job names one rank's view of a mismatch, or half a traceback, or ends a Ctrl-C with
# status 130 and no word. So each rank, its line printed, says so (one byte to every other rank of
# ``MPI.COMM_WORLD``, what an exit ends) and waits until every rank has said so, then leaves: all leave within
# a few milliseconds of each other (MPICH's mpiexec, which kills the rest once one has left, then reports a
# Ctrl-C's 130, not a signal 9). Only a rank that never says (it caught the error and went on, or sits in C
# code) is waited for REPORT_WAIT_S, then the job ends anyway.
REPORT_WAIT_S = 10.0
TAG_REPORTED = 0x5A1D  # the point-to-point tags of "this rank has printed its error" (no collective's tag)
TAG_INTERRUPTED = 0x5A1E  # and of "this rank is ending after a Ctrl-C (rank 0: its line is out)"


def await_reports(tag: int = TAG_REPORTED, seconds: float = REPORT_WAIT_S) -> bool:
    """This rank has printed what it had to say and is about to end: tell every other process of the MPI job
    so, and wait until each has told this one (or ``seconds`` pass). Returns whether all did; True at once
    where MPI is not running (not imported, not initialized, or finalized: it is never started here, in a
    signal handler or at exit) or runs one process.

    One byte with tag ``tag`` to and from every other rank of ``MPI.COMM_WORLD``, polled under a deadline.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is None or not mpi.Is_initialized() or mpi.Is_finalized() or mpi.COMM_WORLD.Get_size() == 1:
        return True
    world = mpi.COMM_WORLD
    peers = [r for r in range(world.Get_size()) if r != world.Get_rank()]
    heard = [bytearray(1) for _ in peers]
    requests = [world.Isend(bytearray(1), peer, tag) for peer in peers]
    requests += [world.Irecv(buffer, peer, tag) for buffer, peer in zip(heard, peers)]
    deadline = time.monotonic() + seconds
    while not mpi.Request.Testall(requests):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
