"""HW3, ring allreduce, submission 18.

Ring reduce-scatter + allgather with blocks n // p long, the first n % p one longer, blocking Send/Recv
ordered by parity; receives into a temporary of n // p elements.
TA: BUG, the temporary is one element too short for the longer blocks: when p does not divide n a message
is longer than its receive buffer (MPI_ERR_TRUNCATE under MPICH).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    counts = [n // size + (1 if r < n % size else 0) for r in range(size)]
    lo = [sum(counts[:r]) for r in range(size + 1)]
    acc = send.copy()
    tmp = np.empty(n // size)
    right, left = (rank + 1) % size, (rank - 1) % size

    def shift(s):
        if rank % 2 == 0:
            comm.Send(acc[lo[s] : lo[s + 1]], dest=right)
            comm.Recv(tmp, source=left)
        else:
            comm.Recv(tmp, source=left)
            comm.Send(acc[lo[s] : lo[s + 1]], dest=right)

    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        shift(s)
        acc[lo[r] : lo[r + 1]] = op(acc[lo[r] : lo[r + 1]], tmp[: counts[r]])
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        shift(s)
        acc[lo[r] : lo[r + 1]] = tmp[: counts[r]]
    recv[:] = acc
