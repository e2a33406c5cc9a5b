"""Exercise 4, reference solution: MPICH's binomial broadcast (collectives/tree.py is the library's)."""

from __future__ import annotations

from typing import Any

import numpy as np


def broadcast(comm: Any, buf: np.ndarray, root: int) -> None:
    rank, p = comm.Get_rank(), comm.Get_size()
    vr = (rank - root) % p
    mask = 1
    while mask < p:  # find the parent, vr - lowbit(vr), and receive from it
        if vr & mask:
            comm.Recv(buf, (vr - mask + root) % p, 0)
            break
        mask <<= 1
    mask >>= 1
    while mask > 0:  # the children vr + 2^j, 2^j < lowbit(vr), largest first
        if vr + mask < p:
            comm.Send(buf, (vr + mask + root) % p, 0)
        mask >>= 1
