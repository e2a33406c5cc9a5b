"""The fold: power-of-two algorithms on any number of ranks, the way MPICH does it.

Recursive doubling and recursive halving pair rank r with r XOR 2^k, which needs a power of two.
With p ranks, let p' be the largest power of two <= p and rem = p - p'. Before the algorithm, the
first 2*rem ranks pair up as (2i, 2i+1): the even one hands its data to the odd one and sits out.
The p' ranks left take new ranks 0..p'-1 (odd rank 2i+1 -> i, rank r >= 2*rem -> r - rem), run the
power-of-two algorithm, and afterwards each odd rank 2i+1 hands the result back to rank 2i.

Cost of the fold: one extra step each way, (alpha + n beta + n gamma) in and (alpha + n beta) out,
paid only when p is not a power of two. New ranks keep the order of the old ones, so every group
of consecutive new ranks stands for a contiguous range of old ranks.

Worked example, p = 6: p' = 4, rem = 2. Ranks (0, 1) and (2, 3) pair up; 0 and 2 hand their data
to 1 and 3 and sit out. New ranks: 1 -> 0, 3 -> 1, 4 -> 2, 5 -> 3; new rank 0 stands for old
ranks {0, 1}, new rank 1 for {2, 3}. Recursive doubling then pairs new ranks (0, 1), (2, 3) and
(0, 2), (1, 3), i.e. old ranks (1, 3), (4, 5), then (1, 4), (3, 5); at the end 1 hands the result
to 0 and 3 to 2: 2 + 2 = 4 rounds where p = 8 would take 3.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from collectives.common import TAG_ALLGATHER, TAG_FOLD, Op


class Fold:
    """The mapping between a rank of p and the new ranks of the power-of-two algorithm (use ``fold_of``)."""

    def __init__(self, rank: int, p: int):
        self.rank, self.p = rank, p
        self.pof2 = 1 << (p.bit_length() - 1)
        self.rem = p - self.pof2
        self.extra = rank < 2 * self.rem  # one of the pairs (2i, 2i+1)
        if self.extra:
            self.newrank = rank // 2 if rank % 2 else -1  # even ranks of a pair sit out
        else:
            self.newrank = rank - self.rem

    def rank_of(self, newrank: int) -> int:
        """The old rank that plays new rank ``newrank``."""
        return 2 * newrank + 1 if newrank < self.rem else newrank + self.rem

    def first_rank_of(self, newrank: int) -> int:
        """The lowest old rank new rank ``newrank`` stands for (2i for a folded pair)."""
        return 2 * newrank if newrank < self.rem else newrank + self.rem

    @functools.cached_property
    def doubling_peers(self) -> tuple[int, ...]:
        """The old rank of this rank's partner in each recursive-doubling step (distances 1, 2, 4, ...
        in new ranks); empty for a rank that sits out. Computed once: Fold objects are cached."""
        peers, mask = [], 1
        while self.newrank >= 0 and mask < self.pof2:
            peers.append(self.rank_of(self.newrank ^ mask))
            mask <<= 1
        return tuple(peers)


@functools.lru_cache(maxsize=1024)
def fold_of(rank: int, p: int) -> Fold:
    """Fold(rank, p), made once (it is read only, and on every short allreduce's path)."""
    return Fold(rank, p)


def fold_in(comm: Any, x: np.ndarray, acc: np.ndarray, f: Op, fold: Fold) -> np.ndarray:
    """Even rank 2i sends x to 2i+1, which sets acc = f(x_2i, x_2i+1). Returns the rank's partial result."""
    if not fold.extra:
        return x
    if fold.newrank < 0:
        comm.Send(x, fold.rank + 1, TAG_FOLD)
        return x
    comm.Recv(acc, fold.rank - 1, TAG_FOLD)
    f(acc, x, out=acc)  # lower rank first
    return acc


def fold_out(comm: Any, acc: np.ndarray, fold: Fold, tag: int = TAG_FOLD) -> None:
    """Odd rank 2i+1 hands the finished result back to rank 2i."""
    if fold.extra:
        if fold.newrank < 0:
            comm.Recv(acc, fold.rank + 1, tag)
        else:
            comm.Send(acc, fold.rank - 1, tag)


def doubling_allgather(comm: Any, buf: np.ndarray, seg: list[int], fold: Fold, tag: int = TAG_ALLGATHER) -> None:
    """Recursive doubling allgather among the p' new ranks, in place in ``buf``.

    Segment j of buf (elements seg[j]:seg[j+1]) starts on new rank j. In step k new ranks j and
    j XOR 2^k swap the 2^k segments each holds, so after log2 p' steps everyone holds all of buf.
    Cost: log2(p') alpha + (p'-1)/p' n beta for equal segments.
    """
    j, mask = fold.newrank, 1
    while mask < fold.pof2:
        partner = j ^ mask
        mine, theirs = j - j % mask, partner - partner % mask  # first segment of each side's group
        peer = fold.rank_of(partner)
        comm.Sendrecv(buf[seg[mine] : seg[mine + mask]], peer, tag, buf[seg[theirs] : seg[theirs + mask]], peer, tag)
        mask <<= 1


def allgather_blocks(comm: Any, buf: np.ndarray, block: int, tag: int = TAG_ALLGATHER) -> None:
    """Every rank r has filled buf[r*block:(r+1)*block]; afterwards every rank holds all p blocks.

    Recursive doubling with the fold: an even rank's block travels to its odd partner first, and
    the odd partner sends the whole gathered buffer back at the end.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    fold = fold_of(rank, p)
    if fold.extra and fold.newrank < 0:
        comm.Send(buf[rank * block : (rank + 1) * block], rank + 1, tag)
    elif fold.extra:
        comm.Recv(buf[(rank - 1) * block : rank * block], rank - 1, tag)
    if fold.newrank >= 0:
        seg = [block * fold.first_rank_of(j) for j in range(fold.pof2)] + [block * p]
        doubling_allgather(comm, buf, seg, fold, tag)
    fold_out(comm, buf, fold, tag)
