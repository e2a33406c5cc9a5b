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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import agree, agree_with_root
from collectives.common import TAG_BCAST, TAG_REDUCE


def reduce_into(comm: Any, x: np.ndarray, acc: np.ndarray, f: np.ufunc, root: int = 0) -> None:
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


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    shape = np.shape(x)
    x, f = agree(comm, x, op, "tree.allreduce", check=check)
    acc = np.empty_like(x)
    reduce_into(comm, x, acc, f, root=0)
    broadcast_into(comm, acc, root=0)
    return acc.reshape(shape)


def reduce(comm: Any, x: Any, op: str = "sum", root: int = 0) -> np.ndarray | None:
    """The elementwise ``op`` of every rank's ``x`` on the root (a new array); None on the other ranks."""
    shape = np.shape(x)
    x, f = agree(comm, x, op, "tree.reduce", root=root)
    acc = np.empty_like(x)
    reduce_into(comm, x, acc, f, root)
    return acc.reshape(shape) if comm.Get_rank() == root else None


def broadcast(comm: Any, x: Any, root: int = 0) -> np.ndarray:
    """The root's ``x`` as a new array on every rank.

    Other ranks pass an array of the same shape and dtype (its values are ignored), as with
    MPI_Bcast, or None: the root's shape and dtype come with the agreement check.
    """
    shape, dtype = agree_with_root(comm, x, "broadcast", root, same_as_root=True)
    if x is not None:
        shape = np.shape(x)
    buf = np.array(x, dtype=dtype).reshape(-1) if comm.Get_rank() == root else np.empty(int(np.prod(shape)), dtype)
    broadcast_into(comm, buf, root)
    return buf.reshape(shape)
