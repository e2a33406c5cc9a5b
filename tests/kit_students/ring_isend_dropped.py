"""HW3, ring allreduce, submission 15.

Passes whole vectors around the ring: Isend of a fresh copy of the travelling vector, then a blocking Recv.
TA: BUG, the Isend request is never waited and the copy it sends is dropped (freed) as soon as Isend
returns, while MPI may still read it. Under MPICH the results are wrong most of the time at n = 65536
(the receiver copies freed memory), and the requests are still pending at return.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    parts = np.empty((size, len(send)))
    parts[rank] = send
    travelling = send.copy()
    for step in range(size - 1):
        comm.Isend(travelling.copy(), dest=(rank + 1) % size, tag=4)
        travelling = np.empty_like(travelling)
        comm.Recv(travelling, source=(rank - 1) % size, tag=4)
        parts[(rank - step - 1) % size] = travelling
    total = parts[0]
    for r in range(1, size):
        total = op(total, parts[r])
    recv[:] = total
