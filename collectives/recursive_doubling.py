"""Recursive-doubling allreduce: log2 p exchanges of the whole vector with partners 1, 2, 4, ... away.

In step k rank r swaps its partial result with rank r XOR 2^k and both combine the two; after
log2 p steps each partial covers all ranks. Non-powers of two: MPICH's fold (pof2.py), p' the
largest power of two <= p and d = 1 if p != p' else 0.

Cost, p ranks, n bytes:
    allreduce   (log2 p' + 2d) alpha + (log2 p' + 2d) n beta + (log2 p' + d) n gamma
The fewest rounds of any algorithm here, but every round moves the whole vector: the short-message
algorithm (MPICH uses it below 2 KiB). Both partners combine the same two operands in rank order
(common.combine), so their bits agree.

The agreement check (check.py) is itself a recursive-doubling allgather over the same partners,
so here it rides along instead of costing log2 p rounds of its own: each message starts with the
headers gathered so far (128 bytes per rank), followed by the data (see _Link for how a receiver
never overflows its buffer when ranks disagree on the size). Data from a rank whose header differs
is not combined, and after the last exchange every rank holds every header and raises the same
MismatchError. For short vectors this halves the time of a checked allreduce.

The recursive-doubling allgather (any p, with the same fold) is pof2.allgather_blocks:
    allgather   (log2 p' + 2d) alpha + about (p - 1 + d (p + 1)) m beta   for m bytes per rank
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import HEADER, as_native_array, header_bytes, raise_mismatch
from collectives.common import TAG_EXCHANGE, TAG_FOLD, combine, reduction
from collectives.pof2 import fold_of

NAME = "recursive_doubling.allreduce"


INLINE = 16 << 10  # data up to this many bytes travels inside the header message
ROW = HEADER.itemsize  # bytes of one rank's header


class _Link:
    """The transfers of recursive doubling with the agreement check on: every message starts with header rows.

    ``rows[r]`` is rank r's 128-byte header once known (Python bytes: this is on the short-message
    path, where microseconds count). A message is [header rows | data] if the sender's data is at
    most INLINE bytes (one message per step, as without the check), else [header rows] followed by
    a second message with the data. A receiver's buffer has room for the rows it expects plus
    INLINE bytes, so no sender can overflow it, and the sender's header says whether a second
    message follows and how long it is.
    """

    def __init__(self, comm: Any, mine: bytes, x: np.ndarray):
        self.comm, self.rank, self.mine = comm, comm.Get_rank(), mine
        self.rows = [b""] * comm.Get_size()
        self.rows[self.rank] = mine
        self.dtype, self.nbytes = x.dtype, x.nbytes  # what a peer with the same header sends

    def send(self, peer: int, data: np.ndarray, rows: slice, tag: int) -> None:
        self.comm.Send(self._packet(rows, data), peer, tag)
        if data.nbytes > INLINE:
            self.comm.Send(data, peer, tag)

    def recv(self, peer: int, into: np.ndarray, rows: slice, tag: int) -> np.ndarray | None:
        """Peer's data (in ``into`` or in the message), or None if peer's header differs from this rank's."""
        room = np.empty((rows.stop - rows.start) * ROW + INLINE, np.uint8)
        self.comm.Recv(room, peer, tag)
        return self._unpack(room, rows, peer, into, tag, second=None)

    def exchange(self, peer: int, data: np.ndarray, into: np.ndarray, ours: slice, theirs: slice,
                 tag: int) -> np.ndarray | None:
        """Swap with peer (our header rows and data for theirs); returns peer's data as recv does."""
        room = np.empty((theirs.stop - theirs.start) * ROW + INLINE, np.uint8)
        self.comm.Sendrecv(self._packet(ours, data), peer, tag, room, peer, tag)
        return self._unpack(room, theirs, peer, into, tag, second=data if data.nbytes > INLINE else None)

    def _packet(self, rows: slice, data: np.ndarray) -> bytes:
        return b"".join((*self.rows[rows], data)) if data.nbytes <= INLINE else b"".join(self.rows[rows])

    def _unpack(self, room: np.ndarray, rows: slice, peer: int, into: np.ndarray, tag: int,
                second: np.ndarray | None) -> np.ndarray | None:
        for i, r in enumerate(range(rows.start, rows.stop)):
            self.rows[r] = room[i * ROW:(i + 1) * ROW].tobytes()
        same = self.rows[peer] == self.mine
        nbytes = self.nbytes if same else int.from_bytes(self.rows[peer][8:16], "little")  # header word 1
        if nbytes <= INLINE:
            if second is not None:
                self.comm.Send(second, peer, tag)
            head = (rows.stop - rows.start) * ROW
            return room[head:head + nbytes].view(self.dtype) if same else None
        target = into if same else np.empty(nbytes, np.uint8)
        if second is not None:
            self.comm.Sendrecv(second, peer, tag, target, peer, tag)
        else:
            self.comm.Recv(target, peer, tag)
        return into if same else None

    def check(self) -> None:
        """After the last step every rank holds every header: raise the same MismatchError everywhere if any differ."""
        if self.rows.count(self.mine) != len(self.rows):
            raise_mismatch(np.frombuffer(b"".join(self.rows), "<i8").reshape(len(self.rows), -1),
                           "ranks disagree on their arrays")


class _Plain:
    """The same transfers without the check (check=False, or p == 1)."""

    def __init__(self, comm: Any, mine: None, x: np.ndarray):
        self.comm = comm

    def send(self, peer: int, data: np.ndarray, rows: slice, tag: int) -> None:
        self.comm.Send(data, peer, tag)

    def recv(self, peer: int, into: np.ndarray, rows: slice, tag: int) -> np.ndarray:
        self.comm.Recv(into, peer, tag)
        return into

    def exchange(self, peer: int, data: np.ndarray, into: np.ndarray, ours: slice, theirs: slice,
                 tag: int) -> np.ndarray:
        self.comm.Sendrecv(data, peer, tag, into, peer, tag)
        return into

    def check(self) -> None:
        pass


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    x = as_native_array(x)
    checked = check and p > 1
    head = header_bytes(x.shape, x.dtype, str(op), NAME) if checked else None
    shape = x.shape
    x = x.reshape(-1)
    try:
        f, error = reduction(op, x.dtype), None
    except (TypeError, ValueError) as e:  # raised below, once every rank knows every header
        f, error = None, e
    if error is not None:
        if not checked:
            raise error
        x = np.zeros(x.nbytes, np.uint8)  # still take part, so that every rank learns every header
    link = (_Link if checked else _Plain)(comm, head, x)
    fold = fold_of(rank, p)
    acc = np.empty_like(x)
    mine = x  # the partial result: x until the first combination writes acc
    if fold.extra and fold.newrank < 0:  # fold in: even rank 2i hands its vector to 2i+1
        link.send(rank + 1, x, slice(rank, rank + 1), TAG_FOLD)
    elif fold.extra:
        theirs = link.recv(rank - 1, acc, slice(rank - 1, rank), TAG_FOLD)
        if theirs is not None and f is not None:
            f(theirs, x, out=acc)  # lower rank first
            mine = acc
    if fold.newrank >= 0:
        tmp = np.empty_like(x) if not checked or x.nbytes > INLINE else None  # short data arrives in the message
        other = None
        for peer, ours, group in fold.doubling_steps:
            theirs = link.exchange(peer, mine, tmp, ours, group, TAG_EXCHANGE)
            if theirs is not None and f is not None:
                # Both partners compute f(lower, upper) into a buffer that is neither operand, so both run
                # the same NumPy loop (an output aliasing one input may take another path, and complex
                # products with fused multiply-adds would then round differently on the two ranks).
                if mine is acc:  # alternate between acc and a second buffer
                    other = np.empty_like(x) if other is None else other
                    out, other = other, acc
                else:
                    out = acc
                combine(f, mine, theirs, out=out, theirs_is_lower=peer < rank)
                acc = mine = out
    if fold.extra and fold.newrank < 0:  # fold out: 2i+1 hands the result (and all headers) back
        theirs = link.recv(rank + 1, acc, slice(0, p), TAG_FOLD)
        if theirs is not None and theirs is not acc:
            acc[...] = theirs
        mine = acc
    elif fold.extra:
        link.send(rank - 1, mine, slice(0, p), TAG_FOLD)
    link.check()
    if error is not None:
        raise error
    return (mine.copy() if mine is x else mine).reshape(shape)  # a copy only when p == 1

