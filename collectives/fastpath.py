"""The short checked allreduce with its per-call Python work cut to the bone (issue: within 1.2x of MPICH).

A checked "auto" allreduce of at most INLINE bytes is one recursive-doubling handshake that carries
the data (agreement.py). At 1 KiB on two ranks the one message costs a few microseconds, and the
Python around it (choosing the algorithm, validating the array and op, building the header,
allocating, the layers of calls) cost as much again. Profiled, nothing there is large; there are
simply many small things, each a dictionary lookup, an allocation or a function call. So the
first call with a given (communicator, shape, dtype, op) works everything out once into a
``Plan``, and later calls do only what must be done per call:

    check the array is contiguous; look up the plan (one dict lookup)
    per partner: one bytes join [header | status | data], one Sendrecv into the plan's buffer,
    one compare of the received header, one ufunc call on (received data, own data): the result
    reshape (only if x is not 1-d)

Same messages, same partners, same bits as ``agreement.handshake``: only the bookkeeping is
cached. A plan is used only while the cost parameters that chose recursive doubling are in force,
only on a rank that the fold leaves in (p a power of two, or the ranks past the folded pairs),
and only for native-order, C-contiguous arrays; anything else takes the general path.
"""

from __future__ import annotations

import weakref
from typing import Any

import numpy as np

from collectives import cost
from collectives.agreement import AGREED, DIFFERS, INLINE, ROOM, header_bytes, raise_unless_agreed
from collectives.common import LOGICAL, TAG_CHECK, reduction
from collectives.fold import fold_of

CALL = "recursive_doubling.allreduce"


class Plan:
    """Everything a short checked allreduce of one (communicator, shape, dtype, op) works out once."""

    __slots__ = (
        "comm",
        "params",
        "expected",
        "head",
        "peers",
        "f",
        "fresh_out",
        "dtype",
        "size",
        "shape",
        "room",
        "theirs",
    )

    def __init__(self, comm: Any, x: np.ndarray, f: Any, op: str, peers: tuple[tuple[int, bool], ...]):
        # the communicator the plan was made for, compared by identity (ids are reused); a weak reference,
        # so that the cache never keeps a communicator (and a simulated world's message record) alive
        self.comm = weakref.ref(comm)
        self.params = cost.get_params()  # the parameters under which "auto" chose recursive doubling
        self.head = header_bytes(x.shape, x.dtype, str(op), CALL)
        self.expected = self.head + AGREED  # how a message from ranks that agree begins
        self.peers = peers  # (partner, partner is the lower rank) per step
        self.f, self.fresh_out = f, op in LOGICAL  # logical ops would return bool: they get an out= array
        self.dtype, self.size = x.dtype, x.size
        self.shape = None if x.ndim == 1 else x.shape  # None: the flat result needs no reshape
        # the receive buffer, and the partner's data in it: made once, reused by every call with this plan
        # (a collective is never reentered on one communicator, and the result never aliases them)
        self.room = np.empty(ROOM, np.uint8)
        self.theirs = np.frombuffer(self.room, x.dtype, x.size, len(self.expected))


_plans: dict[tuple, Plan] = {}
_skip: set[tuple] = set()  # calls the fast path does not apply to (a stale entry costs only speed)


def allreduce(comm: Any, x: np.ndarray, op: str, auto: bool) -> np.ndarray | None:
    """The checked short allreduce of a C-contiguous x by its plan; None where the fast path does not apply."""
    key = (id(comm), x.shape, x.dtype, op, auto)
    plan = _plans.get(key)
    if plan is None or plan.comm() is not comm or plan.params is not cost.get_params():
        if key in _skip:
            return None
        plan = _make(comm, x, op, auto)
        if plan is None:
            return None
    expected, f, room, theirs = plan.expected, plan.f, plan.room, plan.theirs
    n = len(expected)
    mine, agreed = (x if plan.shape is None else x.reshape(-1)), True
    for peer, lower in plan.peers:
        message = b"".join((expected if agreed else plan.head + DIFFERS, mine.data))
        comm.Sendrecv(message, peer, TAG_CHECK, room, peer, TAG_CHECK)
        if not agreed:
            continue
        if room[:n].tobytes() != expected:
            agreed = False
            continue
        a, b = (theirs, mine) if lower else (mine, theirs)  # operands in rank order: the same bits on both
        mine = f(a, b, out=np.empty(plan.size, plan.dtype)) if plan.fresh_out else f(a, b)
    if not agreed:
        raise_unless_agreed(comm, plan.head, False)
    return mine if plan.shape is None else mine.reshape(plan.shape)


def _make(comm: Any, x: np.ndarray, op: str, auto: bool) -> Plan | None:
    """The plan for this call (remembered), or None (also remembered) where the fast path does not apply."""
    from collectives.dispatch import _auto

    p, rank = comm.Get_size(), comm.Get_rank()
    fold = fold_of(rank, p)
    plan = None
    if p > 1 and not fold.extra and x.nbytes <= INLINE and x.dtype.isnative and x.dtype.names is None:
        if not auto or _auto(p, x.nbytes) == "recursive_doubling":
            try:
                f = reduction(op, x.dtype)
                plan = Plan(comm, x, f, op, tuple((peer, peer < rank) for peer in fold.doubling_peers))
            except (TypeError, ValueError):
                pass  # the general path raises it, after the handshake, on every rank
    if len(_plans) + len(_skip) > 512:  # bounded: communicators and shapes come and go
        _plans.clear()
        _skip.clear()
    key = (id(comm), x.shape, x.dtype, op, auto)
    if plan is None:
        _skip.add(key)
    else:
        _plans[key] = plan
    return plan
