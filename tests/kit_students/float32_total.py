"""HW3, allreduce, submission 23 (the course variant that returns the result: allreduce(x, comm, op)).

Passes whole vectors around the ring (Sendrecv) and accumulates them, in rank order, into a float32
array "to save memory", which it returns.
TA: BUG, the result is float32 for float64 input (wrong dtype, and only ~7 significant digits). At every p.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(x, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    parts = np.empty((size, len(x)))
    parts[rank] = x
    travelling = x.copy()
    incoming = np.empty_like(travelling)
    for step in range(size - 1):
        comm.Sendrecv(travelling, dest=(rank + 1) % size, recvbuf=incoming, source=(rank - 1) % size)
        travelling, incoming = incoming, travelling
        parts[(rank - step - 1) % size] = travelling
    total = np.zeros(len(x), dtype=np.float32)
    for r in range(size):
        total[:] = op(total, parts[r])
    return total
