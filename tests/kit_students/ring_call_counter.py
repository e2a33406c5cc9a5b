"""HW3, ring allreduce, submission 05.

Counts its own calls in a module-level counter and uses the count as the message tag, so that messages of
two consecutive calls can never match each other; Irecv/Isend with Wait (upper case), a comm.Barrier() first.
TA: correct (each MPI process has its own counter; every rank calls the same number of times).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401

_calls = 0


def allreduce(send, recv, comm, op):
    global _calls
    _calls += 1
    tag = _calls % 30000
    comm.Barrier()
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    lo = [r * n // size for r in range(size + 1)]
    acc = send.copy()
    tmp = np.empty(n // size + 1)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        m = lo[r + 1] - lo[r]
        rreq = comm.Irecv(tmp[:m], source=left, tag=tag)
        sreq = comm.Isend(acc[lo[s] : lo[s + 1]], dest=right, tag=tag)
        rreq.Wait()
        sreq.Wait()
        acc[lo[r] : lo[r + 1]] = op(acc[lo[r] : lo[r + 1]], tmp[:m])
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        rreq = comm.Irecv(acc[lo[r] : lo[r + 1]], source=left, tag=tag)
        sreq = comm.Isend(acc[lo[s] : lo[s + 1]], dest=right, tag=tag)
        rreq.Wait()
        sreq.Wait()
    recv[:] = acc
