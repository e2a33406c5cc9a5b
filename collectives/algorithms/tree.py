"""Binomial-tree allreduce: reduce up a binomial tree to rank 0, then broadcast down the same tree.

Cost, p ranks, n bytes, L = ceil(log2 p) (Thakur, Rabenseifner & Gropp 2005):
    reduce      L (alpha + n beta + n gamma)
    broadcast   L (alpha + n beta)
    allreduce   2 L alpha + 2 L n beta + L n gamma
Latency grows only as log p (the naive root pays p - 1 messages), but every step carries the
whole vector, so for long vectors the ring and Rabenseifner's algorithm, which send 2(p-1)/p of
it, win.

The binomial tree (MPICH's, relative to the root): in the reduce, rank r receives from r + 2^k
for each 2^k below r's lowest set bit, then sends to r - lowbit(r); the broadcast runs the same
edges backwards. Each subtree is a contiguous range of ranks, reduced as (lower op upper).

Worked example, p = 8, root 0 (L = 3):
    reduce     step 1: 1->0, 3->2, 5->4, 7->6    step 2: 2->0, 6->4    step 3: 4->0
    broadcast  step 1: 0->4                      step 2: 0->2, 4->6    step 3: 0->1, 2->3, 4->5, 6->7
Rank 0 ends the reduce with ((x0 + x1) + (x2 + x3)) + ((x4 + x5) + (x6 + x7)). These are
schedules on flat arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.common import TAG_BCAST, TAG_REDUCE, Op


def reduce_into(comm: Any, x: np.ndarray, acc: np.ndarray, f: Op, root: int = 0) -> None:
    """Binomial reduce of the flat arrays x (read only) into acc on the root; acc is scratch elsewhere."""
    rank, p = comm.Get_rank(), comm.Get_size()
    vr = (rank - root) % p  # rank relative to the root
    mine, tmp = x, None  # my subtree's partial result: x until the first child's data arrives
    mask = 1
    while mask < p:
        if vr & mask:  # my subtree is complete: send it to the parent, vr - mask
            comm.Send(mine, (vr - mask + root) % p, TAG_REDUCE)
            return
        if vr + mask < p:  # child vr + mask holds the next 2^k ranks' partial result
            tmp = np.empty_like(x) if tmp is None else tmp
            comm.Recv(tmp, (vr + mask + root) % p, TAG_REDUCE)
            f(mine, tmp, out=acc)
            mine = acc
        mask <<= 1
    if mine is x:  # a root with no children (p == 1)
        acc[...] = x


def broadcast_into(comm: Any, buf: np.ndarray, root: int = 0) -> None:
    """Binomial broadcast of the root's flat ``buf``, in place on every rank."""
    rank, p = comm.Get_rank(), comm.Get_size()
    vr = (rank - root) % p
    mask = 1
    while mask < p:  # receive from the parent, vr minus my lowest set bit
        if vr & mask:
            comm.Recv(buf, (vr - mask + root) % p, TAG_BCAST)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # send to the children vr + 2^k, largest subtree first
        if vr + mask < p:
            comm.Send(buf, (vr + mask + root) % p, TAG_BCAST)
        mask >>= 1


def allreduce(comm: Any, x: np.ndarray, f: Op = np.add) -> np.ndarray:
    """f over every rank's flat ``x``, as a new flat array on every rank: reduce to rank 0, broadcast back."""
    acc = np.empty_like(x)
    reduce_into(comm, x, acc, f, root=0)
    broadcast_into(comm, acc, root=0)
    return acc


def reduce(comm: Any, x: np.ndarray, f: Op = np.add, root: int = 0) -> np.ndarray | None:
    """f over every rank's flat ``x`` on the root (a new array); None on the other ranks."""
    acc = np.empty_like(x)
    reduce_into(comm, x, acc, f, root)
    return acc if comm.Get_rank() == root else None
