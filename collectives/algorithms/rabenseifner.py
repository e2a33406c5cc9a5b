"""Rabenseifner's allreduce: a recursive-halving reduce-scatter, then a recursive-doubling allgather.

Recursive halving: in the first step rank r pairs with the rank p/2 away; each keeps one half of
the vector, sends the other half and adds the half it receives. Then p/4 away on the quarter it
kept, and so on: after log2 p steps rank r holds block r, reduced. The recursive-doubling
allgather (fold.doubling_allgather) brings the blocks back, doubling what is sent each step.
Non-powers of two: MPICH's fold (fold.py), p' the largest power of two <= p, d = 1 if p != p'.

Cost, p ranks, n bytes (Rabenseifner 2004; Thakur, Rabenseifner & Gropp 2005):
    reduce-scatter  log2 p' alpha + (p' - 1)/p' n beta + (p' - 1)/p' n gamma
    allgather       log2 p' alpha + (p' - 1)/p' n beta
    allreduce       (2 log2 p' + 2d) alpha + (2 (p' - 1)/p' + 2d) n beta + ((p' - 1)/p' + d) n gamma
The ring's bandwidth with only 2 log2 p steps: MPICH's choice for long messages. At p = 2 it is
the ring: the same two messages and the same local work (halving_into receives into the result
and reduces in place, no copies). Each block is reduced in exactly one place and then copied, so
all ranks end with the same bits.

Worked example, p = 4, n = 8 (segments of 2 elements, S_j = elements 2j:2j+2):
    halving   step 1 (distance 2): 0<->2, 1<->3; 0 and 1 keep S0, S1 and send S2, S3; 2 and 3 the reverse
              step 2 (distance 1): 0<->1, 2<->3; 0 keeps S0 and sends S1 (a partial of x0+x2) to 1, ...
              now rank r holds S_r = x0 + x1 + x2 + x3 on its segment
    doubling  step 3 (distance 1): 0<->1, 2<->3 swap one segment; step 4 (distance 2): swap two
4 rounds (the ring: 6) and 3/4 n + 3/4 n elements sent per rank (as the ring). Schedules on flat
arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.algorithms.fold import Fold, doubling_allgather, fold_in, fold_of, fold_out
from collectives.common import TAG_FOLD, TAG_REDUCE_SCATTER, Op, block_bounds


def halving_into(comm: Any, mine: np.ndarray, acc: np.ndarray, f: Op, seg: list[int], fold: Fold) -> None:
    """Recursive-halving reduce-scatter among the p' new ranks.

    ``mine`` is this rank's partial vector (x itself, or acc after the fold); segment j is
    elements seg[j]:seg[j+1]. Afterwards acc[seg[j]:seg[j+1]] on new rank j is segment j reduced
    over all ranks. Step with distance ``mask``: of the 2*mask segments this rank still holds,
    the lower new rank of the pair keeps the lower half.

    The local work is the ring's: one receive and one in-place reduction per step, no copies.
    The peer's half arrives in a part of acc that holds nothing yet: in the first step from x,
    the kept half itself; later, the half given away in the step before (free until the
    allgather refills it, and at least as long as the kept half, having twice its segments). A
    temporary is needed only where there is no such room: in the first step after the fold
    (acc holds a whole partial sum) and when n < p' leaves segments of 0 and 1 elements.
    """
    j = fold.newrank
    lo, hi = 0, fold.pof2  # the segments this rank is still responsible for
    free = (0, 0)  # elements of acc given away in the previous step
    mask = fold.pof2 // 2
    while mask:
        partner = j ^ mask
        mid = lo + mask
        keep, give = ((lo, mid), (mid, hi)) if j < partner else ((mid, hi), (lo, mid))
        k0, k1, g0, g1 = seg[keep[0]], seg[keep[1]], seg[give[0]], seg[give[1]]
        if mine is not acc:  # first step from x: receive straight into the result
            theirs = acc[k0:k1]
        elif free[1] - free[0] >= k1 - k0:
            theirs = acc[free[0] : free[0] + k1 - k0]
        else:
            theirs = np.empty(k1 - k0, dtype=acc.dtype)
        peer = fold.rank_of(partner)
        comm.Sendrecv(mine[g0:g1], peer, TAG_REDUCE_SCATTER, theirs, peer, TAG_REDUCE_SCATTER)
        f(theirs, mine[k0:k1], out=acc[k0:k1])  # each block is reduced on one rank only: any operand order
        mine, free = acc, (g0, g1)
        lo, hi = keep
        mask >>= 1


def allreduce(comm: Any, x: np.ndarray, f: Op = np.add) -> np.ndarray:
    """f over every rank's flat ``x``, as a new flat array on every rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    fold = fold_of(rank, p)
    acc = np.empty_like(x)
    mine = fold_in(comm, x, acc, f, fold)
    if fold.newrank >= 0:
        seg = block_bounds(x.size, fold.pof2)
        halving_into(comm, mine, acc, f, seg, fold)
        doubling_allgather(comm, acc, seg, fold)
    fold_out(comm, acc, fold)
    if p == 1:
        acc[...] = x
    return acc


def reduce_scatter(comm: Any, x: np.ndarray, f: Op = np.add, b: list[int] | None = None) -> np.ndarray:
    """Block r (elements b[r]:b[r+1]) of f over every rank's flat ``x``, on rank r (recursive halving).

    ``b``: the block offsets (common.bounds_of(counts)); default np.array_split's. Non-powers of
    two (MPICH): after the fold, new rank i < rem holds the blocks of old ranks 2i and 2i+1, and
    sends block 2i back.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    fold, b = fold_of(rank, p), b or block_bounds(x.size, p)
    acc = np.empty_like(x)
    mine = fold_in(comm, x, acc, f, fold)
    if fold.newrank >= 0:
        seg = [b[fold.first_rank_of(j)] for j in range(fold.pof2)] + [x.size]
        halving_into(comm, mine, acc, f, seg, fold)
    if p == 1:
        acc[...] = x
    block = acc[b[rank] : b[rank + 1]]
    if fold.extra and fold.newrank < 0:
        comm.Recv(block, rank + 1, TAG_FOLD)
    elif fold.extra:
        comm.Send(acc[b[rank - 1] : b[rank]], rank - 1, TAG_FOLD)
    return block.copy()
