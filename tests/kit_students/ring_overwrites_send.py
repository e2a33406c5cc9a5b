"""HW3, ring allreduce, submission 12.

Ring reduce-scatter + allgather; posts each Irecv before its blocking Send and completes it with the
lower-case req.wait().
TA: BUG, it reduces inside the caller's `send` (no copy), so the caller's input is overwritten with the
sum. `recv` is right; the input is not (at every p >= 2).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    lo = [r * n // size for r in range(size + 1)]
    acc = send  # "no need to copy"
    tmp = np.empty(n // size + 1)
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        m = lo[r + 1] - lo[r]
        req = comm.Irecv(tmp[:m], source=left, tag=step)
        comm.Send(acc[lo[s] : lo[s + 1]], dest=right, tag=step)
        req.wait()
        acc[lo[r] : lo[r + 1]] = op(acc[lo[r] : lo[r + 1]], tmp[:m])
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        req = comm.Irecv(acc[lo[r] : lo[r + 1]], source=left, tag=50 + step)
        comm.Send(acc[lo[s] : lo[s + 1]], dest=right, tag=50 + step)
        req.wait()
    recv[:] = acc
