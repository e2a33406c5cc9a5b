"""Bugs in which block goes where: allgather, alltoall and reduce_scatter.

Signatures: allgather ``fn(comm, x)`` returns every rank's x end to end (rank 0's first);
alltoall ``fn(comm, x)`` takes p blocks of m, block j for rank j, and returns block j from rank j;
reduce_scatter ``fn(comm, x, f)`` returns block r of the reduction, blocks as np.array_split's.
Each function is right except for the mistake its docstring names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import ring
from collectives.common import TAG_ALLGATHER, TAG_ALLTOALL, Op


def allgather_arrival_order(comm: Any, x: np.ndarray) -> np.ndarray:
    """Allgather in the wrong block order: blocks stored in the order they arrive (own block first,
    then the one from rank r - 1, r - 2, ...), not at their source rank's place.

    Forwarding round the ring is right, so every block arrives; only rank 0 at p = 2 gets the order
    right by luck.
    """
    rank, p, n = comm.Get_rank(), comm.Get_size(), x.size
    out = np.empty(p * n, x.dtype)
    out[:n] = x
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(1, p):  # step s: pass on what came in step s - 1, receive rank r - s's block
        comm.Sendrecv(out[(s - 1) * n : s * n], right, TAG_ALLGATHER, out[s * n : (s + 1) * n], left, TAG_ALLGATHER)
    return out


def alltoall_indices_swapped(comm: Any, x: np.ndarray) -> np.ndarray:
    """Alltoall with the send index swapped: pairwise exchange where step s sends block r - s (the
    index of the rank it receives from) to rank r + s, instead of block r + s.

    At p = 2 the two indices are the same rank and the result is right; from p = 3 blocks go to the
    wrong ranks.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    m = x.size // p
    out = np.empty_like(x)
    out[rank * m : (rank + 1) * m] = x[rank * m : (rank + 1) * m]
    for s in range(1, p):
        dest, src = (rank + s) % p, (rank - s) % p
        comm.Sendrecv(x[src * m : (src + 1) * m], dest, TAG_ALLTOALL, out[src * m : (src + 1) * m], src, TAG_ALLTOALL)
    return out


def reduce_scatter_floor_blocks(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Off by one in reduce_scatter's blocks: offsets r * n // p put the n % p extra elements in the
    last blocks, while np.array_split (the collective's contract, MPI's counts) puts them in the first.

    Right when p divides n; otherwise some ranks return one element too few or too many, and the
    blocks in between are shifted.
    """
    p = comm.Get_size()
    b = [r * x.size // p for r in range(p + 1)]
    return ring.reduce_scatter(comm, x, f, b)
