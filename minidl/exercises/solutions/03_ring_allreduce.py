"""Exercise 3, reference solution: ring reduce-scatter, then ring allgather (the library's: collectives' ring.py)."""

from __future__ import annotations

from typing import Any

import numpy as np


def allreduce(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    b = [k * (x.size // p) + min(k, x.size % p) for k in range(p + 1)]  # np.array_split's blocks
    acc = x.copy()
    for s in range(p - 1):  # reduce-scatter
        send, recv = (rank - s - 1) % p, (rank - s - 2) % p
        part = np.empty_like(x[b[recv] : b[recv + 1]])
        comm.Sendrecv(acc[b[send] : b[send + 1]], right, 0, part, left, 0)
        f(part, x[b[recv] : b[recv + 1]], out=acc[b[recv] : b[recv + 1]])
    for s in range(p - 1):  # allgather
        send, recv = (rank - s) % p, (rank - s - 1) % p
        comm.Sendrecv(acc[b[send] : b[send + 1]], right, 1, acc[b[recv] : b[recv + 1]], left, 1)
    return acc
