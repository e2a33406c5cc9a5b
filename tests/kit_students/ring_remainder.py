"""HW3, ring allreduce, submission 11.

Ring reduce-scatter + allgather with blocks of n // p elements, comm.rank/comm.size, comm.barrier() at the end.
TA: BUG, the last n % p elements are never reduced (they keep each rank's own input); wrong whenever p does
not divide n, and everything is wrong when n < p (blocks of 0).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.rank, comm.size
    b = len(send) // size
    acc = send.copy()
    tmp = np.empty(b)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        comm.Sendrecv(acc[s * b : (s + 1) * b], dest=right, recvbuf=tmp, source=left)
        acc[r * b : (r + 1) * b] = op(acc[r * b : (r + 1) * b], tmp)
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        comm.Sendrecv(acc[s * b : (s + 1) * b], dest=right, recvbuf=tmp, source=left)
        acc[r * b : (r + 1) * b] = tmp
    recv[:] = acc
    comm.barrier()
