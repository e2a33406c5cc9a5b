"""Allreduce bugs from recursive doubling (collectives/algorithms/recursive_doubling.py): which ranks meet, in what order.

The kit's allreduce signature: ``fn(comm, x, f)`` returns a new flat array, f over every rank's x,
with the same bits on every rank. Each function is right except for the mistake its docstring names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import ring
from collectives.common import TAG_EXCHANGE, Op, combine


def powers_of_two_only(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Correct only for powers of two: recursive doubling without MPICH's fold (collectives/algorithms/fold.py).

    A partner r XOR 2^k past the last rank is simply skipped. At p = 3 rank 1's second partner would
    be rank 3, so rank 1 ends with x0 + x1 while ranks 0 and 2 hold the whole sum.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    mine, theirs = x.copy(), np.empty_like(x)
    mask = 1
    while mask < p:
        peer = rank ^ mask
        if peer < p:
            comm.Sendrecv(mine, peer, TAG_EXCHANGE, theirs, peer, TAG_EXCHANGE)
            mine = combine(f, mine, theirs, theirs_is_lower=peer < rank)
        mask <<= 1
    return mine


def rank_order_differs(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A reduction order that differs between ranks: every rank gathers all vectors, then reduces them
    starting from its own, ((x_r op x_r+1) op x_r+2) ...

    Each rank's sum is a right answer, within the usual rounding; but float addition is not
    associative, so from p = 3 the ranks' results differ in their last bits, and data-parallel
    replicas that apply them drift apart. Exact for integers, max and min.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    everyone = everyone_rows(comm, x)
    acc = x.copy()
    for k in range(1, p):
        f(acc, everyone[(rank + k) % p], out=acc)
    return acc


def whole_vectors_everywhere(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Right, but not the cost it claims: every rank gathers every whole vector round the ring and
    reduces them in rank order (the same bits on every rank), sending (p - 1) n bytes per rank in
    p - 1 messages where the ring sends 2 (p - 1)/p n in 2 (p - 1): p/2 times the ring's bandwidth.

    Checked with ``cost="ring"``: only the cost property can find it.
    """
    everyone = everyone_rows(comm, x)
    acc = everyone[0].copy()
    for r in range(1, comm.Get_size()):
        f(acc, everyone[r], out=acc)
    return acc


def everyone_rows(comm: Any, x: np.ndarray) -> np.ndarray:
    """Every rank's x as the rows of a (p, n) array (a ring allgather of whole vectors; no bug here)."""
    rank, p, n = comm.Get_rank(), comm.Get_size(), x.size
    everyone = np.empty((p, n), x.dtype)
    everyone[rank] = x
    ring.allgather_into(comm, everyone.reshape(-1), [r * n for r in range(p + 1)])
    return everyone
