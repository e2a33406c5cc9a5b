"""HW3, allreduce, submission 08 (the course variant that passes an mpi4py MPI.Op, e.g. MPI.SUM).

Recursive doubling with Sendrecv; a world that is not a power of two folds its extra ranks onto the
first ones first and hands them the result at the end. Combines with op.Reduce_local(incoming, acc).
TA: correct.
"""

import numpy as np
from mpi4py import MPI


def allreduce(send, recv, comm, op=MPI.SUM):
    rank, size = comm.Get_rank(), comm.Get_size()
    p2 = 1
    while p2 * 2 <= size:
        p2 *= 2
    acc = send.copy()
    tmp = np.empty_like(acc)
    if rank >= p2:  # folded: hand my vector over, get the result back
        comm.Send(acc, dest=rank - p2, tag=3)
        comm.Recv(recv, source=rank - p2, tag=4)
        return
    if rank + p2 < size:
        comm.Recv(tmp, source=rank + p2, tag=3)
        op.Reduce_local(tmp, acc)
    mask = 1
    while mask < p2:
        comm.Sendrecv(acc, dest=rank ^ mask, sendtag=5, recvbuf=tmp, source=rank ^ mask, recvtag=5)
        op.Reduce_local(tmp, acc)
        mask *= 2
    if rank + p2 < size:
        comm.Send(acc, dest=rank + p2, tag=4)
    recv[:] = acc
