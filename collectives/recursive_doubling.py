"""Recursive-doubling allreduce: log2 p exchanges of the whole vector with partners 1, 2, 4, ... away.

In step k rank r swaps its partial result with rank r XOR 2^k and both combine the two; after
log2 p steps each partial covers all ranks. Non-powers of two: MPICH's fold (pof2.py), p' the
largest power of two <= p and d = 1 if p != p' else 0.

Cost, p ranks, n bytes:
    allreduce   (log2 p' + 2d) alpha + (log2 p' + 2d) n beta + (log2 p' + d) n gamma
The fewest rounds of any algorithm here, but every round moves the whole vector: the short-message
algorithm (MPICH uses it below 2 KiB). Both partners combine the same two operands in rank order
(common.combine), so their bits agree.

The agreement check (check.handshake) is itself a recursive doubling over the same partners, so
for vectors of at most INLINE (16 KiB) bytes it is the allreduce: each message is the sender's
128-byte header, a mismatch flag and the partial result, and the data of a rank whose header
differs is never combined. One pass instead of two: for short vectors this halves the time of a
checked allreduce. Longer vectors are checked by a handshake without data, then exchanged here.

The recursive-doubling allgather (any p, with the same fold) is pof2.allgather_blocks:
    allgather   (log2 p' + 2d) alpha + about (p - 1 + d (p + 1)) m beta   for m bytes per rank
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import INLINE, as_native_array, handshake, header_bytes, raise_unless_agreed
from collectives.common import TAG_EXCHANGE, combine, reduction
from collectives.pof2 import fold_in, fold_of, fold_out

NAME = "recursive_doubling.allreduce"


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    x = as_native_array(x)
    shape, flat = x.shape, x.reshape(-1)
    try:
        f, error = reduction(op, x.dtype), None
    except (TypeError, ValueError) as e:  # raised after the check, so that it is the same on every rank
        f, error = None, e
    if check and comm.Get_size() > 1:
        head = header_bytes(shape, x.dtype, str(op), NAME)
        short = x.nbytes <= INLINE
        out, agreed = handshake(comm, head, flat, f) if short else handshake(comm, head)
        raise_unless_agreed(comm, head, agreed)
        if short and error is None:
            return out.reshape(shape)  # the handshake was the allreduce
    if error is not None:
        raise error
    return _doubling(comm, flat, f).reshape(shape)


def _doubling(comm: Any, x: np.ndarray, f: np.ufunc) -> np.ndarray:
    """Recursive doubling of the flat x without the check: f over every rank's x, a new array."""
    rank, p = comm.Get_rank(), comm.Get_size()
    fold = fold_of(rank, p)
    acc = np.empty_like(x)
    mine = fold_in(comm, x, acc, f, fold)  # x, or acc = f(x_2i, x_2i+1) on odd rank 2i+1 of a folded pair
    if fold.newrank >= 0:
        theirs, spare = np.empty_like(x), np.empty_like(x)
        for peer in fold.doubling_peers:
            comm.Sendrecv(mine, peer, TAG_EXCHANGE, theirs, peer, TAG_EXCHANGE)
            # Both partners compute f(lower, upper) into a buffer that is neither operand, so both run
            # the same NumPy loop (an output aliasing one input may take another path, and complex
            # products with fused multiply-adds would then round differently on the two ranks).
            out = spare if mine is acc else acc  # mine is x, acc or spare
            combine(f, mine, theirs, theirs_is_lower=peer < rank, out=out)
            mine = out
    if fold.extra and fold.newrank < 0:
        mine = acc  # the even rank of a folded pair receives the result here
    fold_out(comm, mine, fold)
    return mine.copy() if mine is x else mine  # a copy only when p == 1
