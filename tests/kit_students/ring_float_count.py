"""HW3, ring allreduce, submission 24.

Ring reduce-scatter + allgather with explicit [buf, count, MPI.FLOAT] buffer specifications in Sendrecv.
TA: BUG, the data are float64 but the messages say MPI.FLOAT with count = number of elements, so only the
first half of each block's bytes travels; the rest of the receive buffer keeps stale values. Wrong at every
p >= 2 (n >= p).
"""

import numpy as np
from mpi4py import MPI


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    lo = [r * n // size for r in range(size + 1)]
    acc = send.copy()
    tmp = np.zeros(n // size + 1)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        k, m = lo[s + 1] - lo[s], lo[r + 1] - lo[r]
        comm.Sendrecv([acc[lo[s] : lo[s + 1]], k, MPI.FLOAT], dest=right, recvbuf=[tmp[:m], m, MPI.FLOAT], source=left)
        acc[lo[r] : lo[r + 1]] = op(acc[lo[r] : lo[r + 1]], tmp[:m])
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        k, m = lo[s + 1] - lo[s], lo[r + 1] - lo[r]
        comm.Sendrecv([acc[lo[s] : lo[s + 1]], k, MPI.FLOAT], dest=right, recvbuf=[tmp[:m], m, MPI.FLOAT], source=left)
        acc[lo[r] : lo[r + 1]] = tmp[:m]
    recv[:] = acc
