"""HW4, reduce, submission 13.

Binomial tree towards the root in four rounds ("our cluster has at most 16 cores"); MPI.Status checks
each message's length.
TA: BUG, four rounds reach only 16 ranks: at p >= 17 the ranks 16.. (relative to the root) never send, so
the root's total misses their inputs. Right at every p <= 16.
"""

import numpy as np
from mpi4py import MPI


def reduce(send, recv, comm, op, root):
    rank, size = comm.Get_rank(), comm.Get_size()
    rel = (rank - root) % size
    acc = send.copy()
    tmp = np.empty_like(send)
    for k in range(4):
        mask = 1 << k
        if rel & mask:
            comm.Send(acc, dest=(rel - mask + root) % size, tag=14)
            break
        if rel + mask < size:
            status = MPI.Status()
            comm.Recv(tmp, source=(rel + mask + root) % size, tag=14, status=status)
            assert status.Get_count(MPI.DOUBLE) == len(tmp)
            acc = op(acc, tmp)
    if rank == root:
        recv[:] = acc
