"""Naive allreduce: every rank sends its vector to the root, which reduces them and sends the result back.

Cost, p ranks, n bytes (the root does everything, one message at a time):
    reduce at the root   (p - 1) (alpha + n beta + n gamma)
    send back            (p - 1) (alpha + n beta)
    allreduce            2 (p - 1) alpha + 2 (p - 1) n beta + (p - 1) n gamma
Linear in p in every term: the root's link and its CPU are the bottleneck while the other p - 1
ranks wait. The tree, the ring and Rabenseifner's algorithm all exist to spread that work out.

Also here, the linear building blocks:
    gather   the root receives p - 1 blocks:  (p - 1) (alpha + m beta) at the root
    scatter  the root sends p - 1 blocks:     (p - 1) (alpha + m beta) at the root
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import agree, agree_with_root
from collectives.common import TAG_BCAST, TAG_GATHER, TAG_SCATTER, waitall


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    shape = np.shape(x)
    x, f = agree(comm, x, op, "naive.allreduce", check=check)
    rank, p = comm.Get_rank(), comm.Get_size()
    acc = np.empty_like(x)
    if rank == 0:
        if p == 1:
            acc[...] = x
        tmp = np.empty_like(x)
        for src in range(1, p):  # in rank order: acc = ((x0 op x1) op x2) ...
            comm.Recv(tmp, src, TAG_GATHER)
            f(x if src == 1 else acc, tmp, out=acc)
        for dest in range(1, p):  # a linear broadcast
            comm.Send(acc, dest, TAG_BCAST)
    else:
        comm.Send(x, 0, TAG_GATHER)
        comm.Recv(acc, 0, TAG_BCAST)
    return acc.reshape(shape)


def gather(comm: Any, x: Any, root: int = 0) -> np.ndarray | None:
    """Every rank's ``x`` (same shape and dtype on all) stacked on the root: shape (p, *x.shape); None elsewhere."""
    shape = np.shape(x)
    x, _ = agree(comm, x, None, "gather", root=root)
    rank, p = comm.Get_rank(), comm.Get_size()
    if rank != root:
        comm.Send(x, root, TAG_GATHER)
        return None
    out = np.empty((p, x.size), dtype=x.dtype)
    out[root] = x
    waitall([comm.Irecv(out[src], src, TAG_GATHER) for src in range(p) if src != root])
    return out.reshape((p, *shape))


def scatter(comm: Any, x: Any, root: int = 0) -> np.ndarray:
    """Row r of the root's ``x`` (shape (p, ...)) on rank r. Other ranks pass None (anything else is ignored)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    shape, dtype = agree_with_root(comm, x, "scatter", root, same_as_root=False)
    if len(shape) == 0 or shape[0] != p:
        raise ValueError(f"scatter: the root's array must have shape ({p}, ...) for {p} ranks, got {shape}")
    out = np.empty(shape[1:], dtype=dtype)
    if rank == root:
        x = np.ascontiguousarray(x, dtype=dtype)
        out[...] = x[root]
        waitall([comm.Isend(x[dest], dest, TAG_SCATTER) for dest in range(p) if dest != root])
    else:
        comm.Recv(out, root, TAG_SCATTER)
    return out
