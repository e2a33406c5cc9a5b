"""HW3, ring allreduce, submission 21.

Keeps a module-level accumulator between calls (reallocated only when n changes) and adds every
rank's vector into it as they come round the ring (Sendrecv); the total is computed in rank order.
TA: BUG, the accumulator is never zeroed: the first call is right, every later call with the same n
adds the previous call's total in (state kept between calls). At every p.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401

_total = None


def allreduce(send, recv, comm, op):
    global _total
    rank, size = comm.Get_rank(), comm.Get_size()
    if _total is None or _total.shape != send.shape:
        _total = np.zeros_like(send)
    parts = np.empty((size, len(send)))
    parts[rank] = send
    travelling = send.copy()
    incoming = np.empty_like(travelling)
    for step in range(size - 1):
        comm.Sendrecv(travelling, dest=(rank + 1) % size, recvbuf=incoming, source=(rank - 1) % size)
        travelling, incoming = incoming, travelling
        parts[(rank - step - 1) % size] = travelling
    for r in range(size):
        _total[:] = op(_total, parts[r])
    recv[:] = _total
