"""Recursive-doubling allreduce: log2 p exchanges of the whole vector with partners 1, 2, 4, ... away.

In step k rank r swaps its partial result with rank r XOR 2^k and both combine the two; after
log2 p steps each partial covers all ranks. Non-powers of two: MPICH's fold (fold.py), p' the
largest power of two <= p and d = 1 if p != p' else 0.

Cost, p ranks, n bytes:
    allreduce   (log2 p' + 2d) alpha + (log2 p' + 2d) n beta + (log2 p' + d) n gamma
The fewest rounds of any algorithm here, but every round moves the whole vector: the short-message
algorithm (MPICH uses it below 2 KiB). Both partners combine the same two operands in rank order
(common.combine), so their bits agree.

Worked example, p = 4:
    step 1   0<->1, 2<->3   rank 0 holds x0 + x1, rank 2 holds x2 + x3
    step 2   0<->2, 1<->3   every rank holds (x0 + x1) + (x2 + x3)
2 rounds (the ring: 6), each with the whole vector (the ring: a quarter of it).

Checked and short, this schedule never runs: the agreement handshake is a recursive doubling over
the same partners and carries vectors of up to 16 KiB itself (agreement.py, "a lesson in saving a
latency-bound round"). The recursive-doubling allgather (any p, with the same fold) is
fold.allgather_blocks:
    allgather   (log2 p' + 2d) alpha + about (p - 1 + d (p + 1)) m beta   for m bytes per rank
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.algorithms.fold import fold_in, fold_of, fold_out
from collectives.common import TAG_EXCHANGE, Op, combine


def allreduce(comm: Any, x: np.ndarray, f: Op = np.add) -> np.ndarray:
    """f over every rank's flat ``x``, as a new flat array on every rank."""
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
