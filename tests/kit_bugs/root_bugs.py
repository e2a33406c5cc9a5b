"""Bugs of the rooted collectives and the tree (collectives/algorithms/tree.py): reduce, broadcast, and a tree allreduce.

Signatures: reduce ``fn(comm, x, f, root)`` returns the reduction on the root and None elsewhere;
broadcast ``fn(comm, buf, root)`` fills every rank's buf with the root's and leaves the root's as it
was; allreduce ``fn(comm, x, f)``. Each function is right except for the mistake its docstring names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import ring, tree
from collectives.common import TAG_BCAST, TAG_REDUCE, Op

LEVELS = (1, 2, 4)  # the binomial tree's levels "for up to 8 ranks"


def reduce_root_zero_only(comm: Any, x: np.ndarray, f: Op, root: int) -> np.ndarray | None:
    """Works only for root 0: the root is not passed on to the tree, which therefore reduces to rank 0.

    The root returns its scratch buffer (zeros) unless it is rank 0; rank 0 holds the answer and
    throws it away.
    """
    acc = np.zeros_like(x)
    tree.reduce_into(comm, x, acc, f)
    return acc if comm.Get_rank() == root else None


def broadcast_from_rank_zero(comm: Any, buf: np.ndarray, root: int) -> None:
    """Works only for root 0, and overwrites the root's buffer: the tree is rooted at rank 0 whatever
    root is, so every rank, the root included, ends with rank 0's buffer.
    """
    tree.broadcast_into(comm, buf)


def broadcast_by_masked_sum(comm: Any, buf: np.ndarray, root: int) -> None:
    """A broadcast that is not bit-exact: every rank but the root zeroes its buffer, then all of them
    sum-allreduce it in place ("x + 0 + ... + 0 = x").

    Exact for integers and bools, and for every float but one: -0.0 + 0.0 = +0.0, so a negative zero
    on the root arrives as a positive zero on every rank, and the root's own buffer is changed (an
    optimizer state with -0.0 then differs bitwise from the replica it was broadcast from).
    """
    if comm.Get_rank() != root:
        buf[...] = 0
    buf[...] = ring.allreduce(comm, buf, np.add)


def ranks_above_8_forgotten(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Ranks above 8 forgotten: a binomial-tree allreduce with its levels written out for 8 ranks.

    With p <= 8 every rank is reached. Rank 8 has none of the bits 1, 2, 4 set, so it never sends
    its subtree (ranks 8..15) to rank 0; nor does rank 0 ever send the result to it: ranks 0-7 hold
    the reduction of ranks 0-7, ranks 8 and up that of their own subtree.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, tmp = x.copy(), np.empty_like(x)
    for mask in LEVELS:  # reduce towards rank 0: children rank + 1, + 2, + 4
        if rank & mask:
            comm.Send(acc, rank - mask, TAG_REDUCE)
            break
        if rank + mask < p:
            comm.Recv(tmp, rank + mask, TAG_REDUCE)
            f(acc, tmp, out=acc)
    for mask in reversed(LEVELS):  # broadcast back down the same edges
        if rank % (2 * mask) == mask:
            comm.Recv(acc, rank - mask, TAG_BCAST)
        elif rank % (2 * mask) == 0 and rank + mask < p:
            comm.Send(acc, rank + mask, TAG_BCAST)
    return acc
