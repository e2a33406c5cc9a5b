"""HW3, ring allreduce, submission 09.

Written to the course's contract only: float64, sum, and n >= p ("the assignment promises at least one
element per rank"). Adds with += instead of calling op, and asserts n >= p.
TA: correct for the course (float64 sum, n >= p); it would fail a stricter contract (max, or n < p).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    assert n >= size, "the assignment promises n >= p"
    lo = [r * n // size for r in range(size + 1)]
    recv[:] = send
    tmp = np.empty(n // size + 1)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        m = lo[r + 1] - lo[r]
        comm.Sendrecv(recv[lo[s] : lo[s + 1]], dest=right, recvbuf=tmp[:m], source=left)
        recv[lo[r] : lo[r + 1]] += tmp[:m]
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        m = lo[r + 1] - lo[r]
        comm.Sendrecv(recv[lo[s] : lo[s + 1]], dest=right, recvbuf=tmp[:m], source=left)
        recv[lo[r] : lo[r + 1]] = tmp[:m]
