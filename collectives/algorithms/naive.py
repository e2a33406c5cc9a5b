"""Naive allreduce: every rank sends its vector to the root, which reduces them and sends the result back.

Cost, p ranks, n bytes (the root does everything, one message at a time):
    reduce at the root   (p - 1) (alpha + n beta + n gamma)
    send back            (p - 1) (alpha + n beta)
    allreduce            2 (p - 1) alpha + 2 (p - 1) n beta + (p - 1) n gamma
Linear in p in every term: the root's link and its CPU are the bottleneck while the other p - 1
ranks wait. The tree, the ring and Rabenseifner's algorithm all exist to spread that work out.

Worked example, p = 4: rank 0 receives x1, x2, x3 in turn, forming ((x0 + x1) + x2) + x3, then
sends the sum to 1, 2 and 3: 6 rounds, 6 vectors through rank 0's link, 2 through each other's.

Also here, the linear building blocks, with per-rank counts c_r (the v-variants) or equal ones:
    gather(v)   the root receives p - 1 blocks:  (p - 1) alpha + (n - c_root) beta at the root
    scatter(v)  the root sends p - 1 blocks:     (p - 1) alpha + (n - c_root) beta at the root
Every function here is a schedule on flat arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectives.common import TAG_BCAST, TAG_GATHER, TAG_SCATTER, Op, waitall


def allreduce(comm: Any, x: np.ndarray, f: Op = np.add) -> np.ndarray:
    """f over every rank's flat ``x``, as a new flat array on every rank."""
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
    return acc


def gatherv(comm: Any, x: np.ndarray, bounds: Sequence[int], root: int = 0) -> np.ndarray | None:
    """Every rank's flat ``x`` (rank r's of bounds[r+1] - bounds[r] elements) end to end on the root; None elsewhere."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if rank != root:
        comm.Send(x, root, TAG_GATHER)
        return None
    out = np.empty(bounds[p], dtype=x.dtype)
    out[bounds[root] : bounds[root + 1]] = x
    waitall([comm.Irecv(out[bounds[s] : bounds[s + 1]], s, TAG_GATHER) for s in range(p) if s != root])
    return out


def scatterv(comm: Any, x: np.ndarray | None, out: np.ndarray, bounds: Sequence[int], root: int = 0) -> None:
    """Elements bounds[r]:bounds[r+1] of the root's flat ``x`` into ``out`` on rank r (x: None off the root)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if rank != root:
        comm.Recv(out, root, TAG_SCATTER)
        return
    assert x is not None
    out[...] = x[bounds[root] : bounds[root + 1]]
    waitall([comm.Isend(x[bounds[d] : bounds[d + 1]], d, TAG_SCATTER) for d in range(p) if d != root])
