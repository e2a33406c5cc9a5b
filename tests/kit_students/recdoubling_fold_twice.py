"""HW3, allreduce, submission 19 (this course variant asks for sum and max).

Recursive doubling with Sendrecv; a world that is not a power of two first folds its extra ranks onto
the first ones and sends them the result at the end.
TA: BUG, a folded rank combines the result it gets back with its own input (`acc = op(acc, result)`),
so its input counts twice. Harmless for max (max(a, a) = a), wrong for sum on the folded ranks whenever p
is not a power of two (p = 3, 5, 6, 7, ...).
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    p2 = 1
    while p2 * 2 <= size:
        p2 *= 2
    acc = send.copy()
    tmp = np.empty_like(acc)
    if rank >= p2:
        comm.Send(acc, dest=rank - p2, tag=3)
        comm.Recv(tmp, source=rank - p2, tag=4)
        recv[:] = op(acc, tmp)
        return
    if rank + p2 < size:
        comm.Recv(tmp, source=rank + p2, tag=3)
        acc = op(acc, tmp)
    mask = 1
    while mask < p2:
        comm.Sendrecv(acc, dest=rank ^ mask, sendtag=5, recvbuf=tmp, source=rank ^ mask, recvtag=5)
        acc = op(acc, tmp)
        mask *= 2
    if rank + p2 < size:
        comm.Send(acc, dest=rank + p2, tag=4)
    recv[:] = acc
