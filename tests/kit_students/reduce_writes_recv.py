"""HW4, reduce, submission 12.

Binomial tree towards the root (Send/Recv), then `recv[:] = acc` on every rank.
TA: BUG, recv is significant only at the root, but the non-root ranks write their partial sums into it
(a caller that passes a buffer it still uses there gets it overwritten). The root is right. At every p >= 2.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def reduce(send, recv, comm, op, root):
    rank, size = comm.Get_rank(), comm.Get_size()
    rel = (rank - root) % size
    acc = send.copy()
    tmp = np.empty_like(send)
    mask = 1
    while mask < size:
        if rel & mask:
            comm.Send(acc, dest=(rel - mask + root) % size, tag=13)
            break
        if rel + mask < size:
            comm.Recv(tmp, source=(rel + mask + root) % size, tag=13)
            acc = op(acc, tmp)
        mask <<= 1
    recv[:] = acc
