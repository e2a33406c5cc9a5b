"""Alltoall: rank r's block j goes to rank j, so every rank ends with one block from every rank.

The transpose of a p x p matrix of blocks distributed by rows: block (r, j) moves to rank j's row
r. Two algorithms, as in MPICH, with n the bytes a rank sends in all (p blocks of m = n / p):

pairwise exchange   p - 1 steps; in step s rank r sends block r+s to rank r+s and receives block
                    r-s's from rank r-s (mod p). Every block goes straight to its owner.
    cost  (p - 1) alpha + (p - 1)/p n beta                       the long-message algorithm
Bruck et al. 1997   rotate so that slot i holds the block for rank r+i; in round k (2^k = 1, 2, 4
                    ...) send every slot whose index has bit k set to rank r + 2^k, which puts
                    them there; after ceil(log2 p) rounds slot i holds rank r-i's block for r.
    cost  ceil(log2 p) alpha + ceil(log2 p) / 2 n beta (about)   the short-message algorithm
Counts may differ per pair (alltoallv, pairwise): rank r sends sb[j]:sb[j+1] of x to rank j and
receives rank j's into rb[j]:rb[j+1] of the result.

Worked example, p = 4, Bruck, on rank 0 (slot i holds a block of rank 0-i for rank 0+i first):
    round 1 (bit 0): sends slots 1, 3 to rank 1, receives rank 3's slots 1, 3
    round 2 (bit 1): sends slots 2, 3 to rank 2, receives rank 2's slots 2, 3
2 rounds against pairwise exchange's 3, at the price of forwarding slot 3 twice. Schedules on flat
arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectives.common import TAG_ALLTOALL


def pairwise(comm: Any, x: np.ndarray, sb: Sequence[int], rb: Sequence[int]) -> np.ndarray:
    """Pairwise exchange of the flat x: elements sb[j]:sb[j+1] go to rank j; rank j's land at rb[j]:rb[j+1]."""
    rank, p = comm.Get_rank(), comm.Get_size()
    out = np.empty(rb[p], dtype=x.dtype)
    out[rb[rank] : rb[rank + 1]] = x[sb[rank] : sb[rank + 1]]
    for s in range(1, p):
        dest, src = (rank + s) % p, (rank - s) % p
        comm.Sendrecv(x[sb[dest] : sb[dest + 1]], dest, TAG_ALLTOALL, out[rb[src] : rb[src + 1]], src, TAG_ALLTOALL)
    return out


def bruck(comm: Any, x: np.ndarray, m: int) -> np.ndarray:
    """Bruck's alltoall of the flat x of p blocks of m elements: block j to rank j, in ceil(log2 p) rounds."""
    rank, p = comm.Get_rank(), comm.Get_size()
    slots = np.roll(x.reshape(p, m), -rank, axis=0)  # slot i: the block for rank + i (a new array)
    k = 1
    while k < p:
        moving = [i for i in range(p) if i & k]
        send = np.ascontiguousarray(slots[moving])
        recv = np.empty_like(send)
        comm.Sendrecv(send, (rank + k) % p, TAG_ALLTOALL, recv, (rank - k) % p, TAG_ALLTOALL)
        slots[moving] = recv
        k <<= 1
    # slot i now holds the block rank - i sent to this rank
    return slots[(rank - np.arange(p)) % p].reshape(-1)
