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
so here it rides along instead of costing log2 p rounds of its own: each exchange sends the
headers gathered so far (128 bytes per rank, tag TAG_CHECK) and then the data. A receiver reads
the headers first and sizes its buffer by the sender's header, so mismatched ranks can never
overflow a buffer; their data is simply not combined, and after the last exchange every rank
holds every header and raises the same MismatchError. For short vectors this halves the time.

The recursive-doubling allgather (any p, with the same fold) is pof2.allgather_blocks:
    allgather   (log2 p' + 2d) alpha + about (p - 1 + d (p + 1)) m beta   for m bytes per rank
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import HEADER, as_native_array, header, raise_mismatch
from collectives.common import TAG_CHECK, TAG_EXCHANGE, TAG_FOLD, combine, reduction, waitall
from collectives.pof2 import Fold

NAME = "recursive_doubling.allreduce"


class _Link:
    """Point-to-point transfers that, when the agreement check is on, send header rows before the data."""

    def __init__(self, comm: Any, table: np.ndarray | None):
        self.comm, self.table = comm, table

    def send(self, peer: int, data: np.ndarray, rows: slice, tag: int) -> None:
        if self.table is not None:
            self.comm.Send(self.table[rows], peer, TAG_CHECK)
        self.comm.Send(data, peer, tag)

    def recv(self, peer: int, into: np.ndarray, rows: slice, tag: int) -> bool:
        """Receive peer's header rows, then its data: into ``into`` if its header equals mine, else aside."""
        if self.table is not None:
            self.comm.Recv(self.table[rows], peer, TAG_CHECK)
            if not self._agrees(peer):
                self.comm.Recv(np.empty(int(self.table[peer][1]), np.uint8), peer, tag)  # [1]: nbytes
                return False
        self.comm.Recv(into, peer, tag)
        return True

    def exchange(self, peer: int, data: np.ndarray, into: np.ndarray, ours: slice, theirs: slice, tag: int) -> bool:
        """Swap with peer: header rows (ours for theirs), then data. True if peer's data landed in ``into``."""
        if self.table is None:
            self.comm.Sendrecv(data, peer, tag, into, peer, tag)
            return True
        # Both messages go out at once; the data receive is posted once peer's header says how big it is.
        requests = [self.comm.Isend(self.table[ours], peer, TAG_CHECK), self.comm.Isend(data, peer, tag)]
        self.comm.Recv(self.table[theirs], peer, TAG_CHECK)
        same = self._agrees(peer)
        self.comm.Recv(into if same else np.empty(int(self.table[peer][1]), np.uint8), peer, tag)
        waitall(requests)
        return same

    def _agrees(self, peer: int) -> bool:
        return self.table[peer].tobytes() == self.table[self.comm.Get_rank()].tobytes()


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    x = as_native_array(x)
    shape, table = x.shape, None
    if check and p > 1:
        table = np.zeros((p, HEADER.itemsize // 8), dtype="<i8")
        table[rank] = header(x, op, NAME, -1)
    x = x.reshape(-1)
    try:
        f, error = reduction(op, x.dtype), None
    except (TypeError, ValueError) as e:  # raised below, once every rank knows every header
        f, error = None, e
    if error is not None:
        if table is None:
            raise error
        x = np.zeros(x.nbytes, np.uint8)  # still take part, so that every rank learns every header
    link, fold = _Link(comm, table), Fold(rank, p)
    acc = np.empty_like(x)
    mine = x  # the partial result: x until the first combination writes acc
    if fold.extra and fold.newrank < 0:  # fold in: even rank 2i hands its vector to 2i+1
        link.send(rank + 1, x, slice(rank, rank + 1), TAG_FOLD)
    elif fold.extra:
        if link.recv(rank - 1, acc, slice(rank - 1, rank), TAG_FOLD) and f is not None:
            f(acc, x, out=acc)  # lower rank first
            mine = acc
    if fold.newrank >= 0:
        tmp, other = np.empty_like(x), None
        mask = 1
        while mask < fold.pof2:
            partner = fold.newrank ^ mask
            peer = fold.rank_of(partner)
            ours, theirs = fold.ranks_of_group(fold.newrank, mask), fold.ranks_of_group(partner, mask)
            if link.exchange(peer, mine, tmp, ours, theirs, TAG_EXCHANGE) and f is not None:
                # Both partners compute f(lower, upper) into a buffer that is neither operand, so both run
                # the same NumPy loop (an output aliasing one input may take another path, and complex
                # products with fused multiply-adds would then round differently on the two ranks).
                if mine is acc:  # alternate between acc and a second buffer
                    other = np.empty_like(x) if other is None else other
                    out, other = other, acc
                else:
                    out = acc
                combine(f, mine, tmp, out=out, theirs_is_lower=peer < rank)
                acc = mine = out
            mask <<= 1
    if fold.extra and fold.newrank < 0:  # fold out: 2i+1 hands the result (and all headers) back
        link.recv(rank + 1, acc, slice(0, p), TAG_FOLD)
        mine = acc
    elif fold.extra:
        link.send(rank - 1, mine, slice(0, p), TAG_FOLD)
    if table is not None and table.tobytes() != table[:1].tobytes() * p:
        raise_mismatch(table, "ranks disagree on their arrays")
    if error is not None:
        raise error
    return (mine.copy() if mine is x else mine).reshape(shape)  # a copy only when p == 1

