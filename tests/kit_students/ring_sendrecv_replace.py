"""HW3, ring allreduce, submission 08b (the fix of submission 16).

Passes whole vectors around the ring with Sendrecv_replace (one buffer, sent then overwritten by what
arrives: MPI's own call for that) and sums the p vectors in rank order.
TA: correct.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    parts = np.empty((size, len(send)))
    parts[rank] = send
    travelling = send.copy()
    for step in range(size - 1):
        comm.Sendrecv_replace(travelling, dest=(rank + 1) % size, source=(rank - 1) % size)
        parts[(rank - step - 1) % size] = travelling
    total = parts[0]
    for r in range(1, size):
        total = op(total, parts[r])
    recv[:] = total
