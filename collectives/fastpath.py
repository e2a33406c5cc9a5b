"""The short checked allreduce with its per-call Python work cut to the bone (issue: within 1.2x of MPICH).

A checked "auto" allreduce of at most INLINE bytes is one recursive-doubling handshake that carries
the data (agreement.py). At 1 KiB on two ranks the one message costs a few microseconds, and the
Python around it (choosing the algorithm, validating the array and op, building the header,
allocating, the layers of calls) cost as much again. Profiled, nothing there is large; there are
simply many small things, each a dictionary lookup, an allocation or a function call. So the
first call with a given (communicator, shape, dtype, op) works everything out once into a
``Plan``, and later calls do only what must be done per call:

    find the plan: the last one used, by identity and equality of a few fields (no key, no hash);
        a dictionary lookup only when the call differs from the last one
    copy x into the plan's send buffer, whose [header | status] part is written once
    per partner: on mpi4py, start and wait for two persistent requests made once (Recv_init,
        Send_init: no buffer specs for mpi4py to parse, and MPICH's Start/Wait costs less than its
        Sendrecv); elsewhere (simulated ranks) one Sendrecv of the plan's buffers. Then one compare
        of the received [header | status] and one ufunc call on two views made once (the operands
        in rank order), which allocates the new result

With one partner (p = 2) all of that is one tuple unpacked, and the ufunc reads x itself where it
is C-contiguous rather than its copy in the send buffer (the same values; measured faster at
16 KiB). The views have x's shape, so the result needs no reshape, and copying x into the send
buffer is a NumPy assignment that takes any strides: a non-contiguous x needs no copy of its own.
Measured per call at 1 KiB, p = 2 (echo communicator, benchmarks/short_allreduce.py): the Python
work went from about 1.9 us to 1.3 us with Sendrecv; on MPICH, a bare exchange of the message
takes about 1.6 us by Start/Wait against 2.2 us by Sendrecv (fastest of 21 interleaved repeats of
300 calls each).

The persistent requests hold the communicator inside MPI: a plan frees them when it is dropped,
and every plan's are freed at exit, before mpi4py finalizes MPI (which would warn of any left).

Same messages, same partners, same bits as ``agreement.handshake``: only the bookkeeping is
cached. A plan is used only while the cost parameters that chose recursive doubling are in force,
only on a rank that the fold leaves in (p a power of two, or the ranks past the folded pairs),
and only for native-order arrays of a numeric dtype; anything else takes the general path.
"""

from __future__ import annotations

import atexit
import functools
import sys
import weakref
from typing import Any

import numpy as np

from collectives import cost
from collectives.agreement import (
    AGREED,
    DIFFERS,
    INLINE,
    ROOM,
    STATUS,
    header_bytes,
    raise_unless_agreed,
    wait_in_check,
)
from collectives.algorithms.fold import fold_of
from collectives.auto import auto_algorithm
from collectives.common import LOGICAL, TAG_CHECK, reduction

CALL = "recursive_doubling.allreduce"


def _dead() -> None:
    return None


class Plan:
    """Everything a short checked allreduce of one (communicator, shape, dtype, op) works out once."""

    __slots__ = (
        "comm",
        "params",
        "shape",
        "dtype",
        "op",
        "auto",
        "head",
        "expected",
        "steps",
        "f",
        "fresh_out",
        "send",
        "sendbuf",
        "room",
        "received",
        "requests",
        "exchange",
        "one",
    )

    def __init__(self, comm: Any, x: np.ndarray, f: Any, op: Any, auto: bool, peers: tuple[tuple[int, bool], ...]):
        # the communicator the plan was made for, compared by identity (ids are reused); a weak reference,
        # so that the cache never keeps a communicator (and a simulated world's message record) alive
        self.comm = weakref.ref(comm)
        self.requests: list = []  # first: __del__ frees whatever was made, even if a later line raises
        self.params = cost.get_params()  # the parameters under which "auto" chose recursive doubling
        self.shape, self.dtype, self.op, self.auto = x.shape, x.dtype, op, auto
        self.head = header_bytes(x.shape, x.dtype, str(op), CALL)
        self.expected = self.head + AGREED  # how a message from ranks that agree begins
        n = len(self.expected)
        self.f = f
        # logical ops would return bool: they get an out= array; so does a 0-d x (f would return a scalar)
        self.fresh_out = op in LOGICAL or x.ndim == 0
        # the send buffer [header | status | data], the header written once; a call copies its data in
        self.sendbuf = np.empty(n + x.nbytes, np.uint8)
        self.sendbuf[:n] = np.frombuffer(self.expected, np.uint8)
        self.send = self.sendbuf[n:].view(x.dtype).reshape(x.shape)
        # the receive buffer (ROOM bytes: a rank that brings a longer message cannot overflow it), and the
        # partner's data in it: made once, reused by every call with this plan (a collective is never
        # reentered on one communicator, and the result never aliases either buffer)
        self.room = np.empty(ROOM, np.uint8)
        self.received = self.room[:n]
        theirs = np.frombuffer(self.room, x.dtype, x.size, n).reshape(x.shape)
        # per step: (partner, first operand, second operand), the operands in rank order so both partners
        # compute the same bits
        self.steps = tuple((peer, theirs, self.send) if lower else (peer, self.send, theirs) for peer, lower in peers)
        # how a step exchanges its messages: on mpi4py, persistent requests made once (Recv_init, Send_init),
        # which a call starts and waits for: no buffer specs to parse per call, and MPICH's Sendrecv path
        # around them costs more than the Start/Wait pair (0.5 us a call, p = 2, measured)
        self.exchange: tuple = ()
        self.one: tuple | None = None
        mpi = sys.modules.get("mpi4py.MPI")
        if mpi is not None and isinstance(comm, mpi.Comm):
            _free_at_exit()
            for peer, _, _ in self.steps:
                recv = comm.Recv_init([self.room, mpi.BYTE], peer, TAG_CHECK)
                self.requests.append(recv)
                send = comm.Send_init([self.sendbuf, mpi.BYTE], peer, TAG_CHECK)
                self.requests.append(send)
                wait_recv = functools.partial(wait_in_check, comm, self.head, recv.Test)  # says if a partner skipped
                self.exchange += ((recv.Start, send.Start, send.Wait, wait_recv),)
        if len(self.steps) == 1 and self.exchange and not self.fresh_out:
            # the common case (p = 2, MPI) with all it needs in one tuple: one unpacking instead of many lookups
            lower = peers[0][1]  # the partner is the lower rank
            self.one = (*self.exchange[0], self.received, self.expected, f, theirs, lower)

    def __del__(self) -> None:
        free(self.requests)


def free(requests: list) -> None:
    """Free a plan's persistent requests (MPI complains at exit of any left), unless MPI has finalized already."""
    mpi = sys.modules.get("mpi4py.MPI")
    try:
        if requests and mpi is not None and not mpi.Is_finalized():
            for request in requests:
                request.Free()
    except Exception:  # at interpreter exit, or a request already freed
        pass
    requests.clear()


_registered = False


def _free_at_exit() -> None:
    """Free every plan's requests at exit: atexit's functions run before mpi4py's MPI_Finalize."""
    global _registered
    if not _registered:
        atexit.register(_at_exit)
        _registered = True


def _at_exit() -> None:
    for plan in [*_plans.values(), _last]:  # explicitly: something may still hold a plan
        free(getattr(plan, "requests", []))
    clear()


class _Never:
    """A plan that matches no call (before the first call, and after the cache is cleared)."""

    comm = staticmethod(_dead)
    shape = dtype = op = auto = params = None


_last: Any = _Never()  # the plan of the last call: most programs repeat one call
_plans: dict[tuple, Plan] = {}
_skip: set[tuple] = set()  # calls the fast path does not apply to (a stale entry costs only speed)


def allreduce(comm: Any, x: np.ndarray, op: Any, auto: bool) -> np.ndarray | None:
    """The checked short allreduce of an ndarray x by its plan; None where the fast path does not apply."""
    plan = _last
    if (
        plan.comm() is not comm
        or plan.dtype is not x.dtype
        or plan.shape != x.shape
        or plan.op != op
        or plan.auto is not auto
        or plan.params is not cost._params
    ):
        plan = _find(comm, x, op, auto)
        if plan is None:
            return None
    plan.send[...] = x
    one = plan.one
    if one is not None:  # one exchange by persistent requests (p = 2; p = 3 on rank 2)
        start_recv, start_send, wait_send, wait_recv, received, expected, f, theirs, lower = one
        start_recv()
        start_send()
        wait_send()
        wait_recv()
        if received.tobytes() == expected:
            # the operands in rank order; x itself where it is C-contiguous (the same values as the send
            # buffer's: at 16 KiB, one call at a time on the shared machine, 0.05-0.15x MPI's time faster)
            mine = x if x.flags.c_contiguous else plan.send
            return f(theirs, mine) if lower else f(mine, theirs)
        raise_unless_agreed(comm, plan.head, False)
        raise AssertionError("raise_unless_agreed(..., False) raises")
    return _steps(comm, plan)


def _steps(comm: Any, plan: Plan) -> np.ndarray:
    """The exchanges of a plan, any number of them, by persistent requests or Sendrecv: the result, or raise."""
    send, f, agreed, mine = plan.send, plan.f, True, plan.send
    try:
        for i, (peer, a, b) in enumerate(plan.steps):
            if i:
                if agreed:
                    send[...] = mine
                else:  # from here on the messages say so (their data no longer matter)
                    plan.sendbuf[len(plan.head)] = DIFFERS[0]
            if plan.exchange:
                for step in plan.exchange[i]:
                    step()
            else:
                comm.Sendrecv(plan.sendbuf, peer, TAG_CHECK, plan.room, peer, TAG_CHECK)
            if agreed:
                if plan.received.tobytes() == plan.expected:
                    mine = f(a, b, out=np.empty(plan.shape, plan.dtype)) if plan.fresh_out else f(a, b)
                else:
                    agreed = False
    finally:
        plan.sendbuf[len(plan.head)] = AGREED[0]  # the send buffer's status is AGREED again for the next call
    if not agreed:
        raise_unless_agreed(comm, plan.head, False)
    return mine


def _find(comm: Any, x: np.ndarray, op: Any, auto: bool) -> Plan | None:
    """The plan for this call (and make it the last one used), or None where the fast path does not apply."""
    global _last
    if x.nbytes > INLINE:
        return None
    key = (id(comm), x.shape, x.dtype, op, auto)
    plan = _plans.get(key)
    if plan is None or plan.comm() is not comm or plan.params is not cost.get_params():
        if key in _skip:
            return None
        plan = _make(comm, x, op, auto)
        if plan is None:
            return None
    _last = plan
    return plan


def _make(comm: Any, x: np.ndarray, op: Any, auto: bool) -> Plan | None:
    """The plan for this call (remembered), or None (also remembered) where the fast path does not apply."""

    p, rank = comm.Get_size(), comm.Get_rank()
    fold = fold_of(rank, p)
    plan = None
    if p > 1 and not fold.extra and x.dtype.isnative and x.dtype.names is None:
        if not auto or auto_algorithm(p, x.nbytes) == "recursive_doubling":
            try:
                f = reduction(op, x.dtype)
                plan = Plan(comm, x, f, op, auto, tuple((peer, peer < rank) for peer in fold.doubling_peers))
            except (TypeError, ValueError):
                pass  # the general path raises it, after the handshake, on every rank
    if len(_plans) + len(_skip) > 512:  # bounded: communicators and shapes come and go
        clear()
    key = (id(comm), x.shape, x.dtype, op, auto)
    if plan is None:
        _skip.add(key)
    else:
        _plans[key] = plan
    return plan


def clear() -> None:
    """Forget every plan (tests; the cache also clears itself when it grows past 512 entries)."""
    global _last
    _plans.clear()
    _skip.clear()
    _last = _Never()


assert len(AGREED) == len(DIFFERS) == STATUS and AGREED[1:] == DIFFERS[1:]  # only the first status byte differs
