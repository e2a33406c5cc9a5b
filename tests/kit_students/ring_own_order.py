"""HW3, ring allreduce, submission 22.

Passes whole vectors around the ring (Sendrecv) and adds each one as it arrives, starting from its own.
TA: BUG, each rank adds the p vectors in a different order (its own first, then its left neighbour's, ...),
so floating-point rounding differs and the ranks end with different bits at p >= 3: an allreduce must
give every rank the same result. Each rank's sum is within rounding of the true sum.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    total = send.copy()
    travelling = send.copy()
    incoming = np.empty_like(travelling)
    for _ in range(size - 1):
        comm.Sendrecv(travelling, dest=(rank + 1) % size, recvbuf=incoming, source=(rank - 1) % size)
        travelling, incoming = incoming, travelling
        total = op(total, travelling)
    recv[:] = total
