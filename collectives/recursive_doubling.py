"""Recursive-doubling allreduce: log2 p exchanges of the whole vector with partners 1, 2, 4, ... away.

In step k rank r swaps its partial result with rank r XOR 2^k and both combine the two; after
log2 p steps each partial covers all ranks. Non-powers of two: MPICH's fold (pof2.py), p' the
largest power of two <= p and d = 1 if p != p' else 0.

Cost, p ranks, n bytes:
    allreduce   (log2 p' + 2d) alpha + (log2 p' + 2d) n beta + (log2 p' + d) n gamma
The fewest steps of any algorithm here, but every step moves the whole vector: the short-message
algorithm (MPICH uses it below 2 KiB). Both partners combine the same two operands in rank order
(common.combine), so their bits agree.

Also here, the recursive-doubling allgather (any p, with the same fold):
    allgather   (log2 p' + 2d) alpha + ((p' - 1)/p' + ...) p m beta  for m bytes per rank
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import agree
from collectives.common import TAG_EXCHANGE, combine
from collectives.pof2 import Fold, allgather_blocks, fold_in, fold_out


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    shape = np.shape(x)
    x, f = agree(comm, x, op, "recursive_doubling.allreduce", check=check)
    rank, p = comm.Get_rank(), comm.Get_size()
    fold = Fold(rank, p)
    acc = np.empty_like(x)
    mine = fold_in(comm, x, acc, f, fold)  # x until the first combination writes acc
    if fold.newrank >= 0:
        tmp = np.empty_like(x)
        mask = 1
        while mask < fold.pof2:
            peer = fold.rank_of(fold.newrank ^ mask)
            comm.Sendrecv(mine, peer, TAG_EXCHANGE, tmp, peer, TAG_EXCHANGE)
            combine(f, mine, tmp, out=acc, theirs_is_lower=peer < rank)
            mine = acc
            mask <<= 1
    fold_out(comm, acc, fold)
    if mine is x and fold.newrank >= 0:  # p == 1
        acc[...] = x
    return acc.reshape(shape)


def allgather(comm: Any, x: Any) -> np.ndarray:
    """Every rank's ``x`` (same shape and dtype on all), stacked: shape (p, *x.shape) on every rank."""
    shape = np.shape(x)
    x, _ = agree(comm, x, None, "recursive_doubling.allgather")
    rank, p, m = comm.Get_rank(), comm.Get_size(), x.size
    out = np.empty(p * m, dtype=x.dtype)
    out[rank * m:(rank + 1) * m] = x
    allgather_blocks(comm, out, m)
    return out.reshape((p, *shape))
