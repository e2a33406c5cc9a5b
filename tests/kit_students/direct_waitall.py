"""HW3, allreduce, submission 04.

Sets mpi4py.rc(initialize=False, finalize=False) at import, as the course's launcher wants. Reduce-scatter by
direct exchange (block j goes to rank j), then every rank sends its reduced block to everyone: Isend/Irecv
with [buf, MPI.DOUBLE] buffer specifications, completed with MPI.Request.Waitall(reqs).
TA: correct.
"""

import mpi4py

mpi4py.rc(initialize=False, finalize=False)
import numpy as np  # noqa: E402
from mpi4py import MPI  # noqa: E402


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    lo = [j * n // size for j in range(size + 1)]
    mine = lo[rank + 1] - lo[rank]
    parts = np.empty((size, mine))
    reqs = []
    for j in range(size):
        reqs.append(comm.Irecv([parts[j], MPI.DOUBLE], source=j, tag=1))
        reqs.append(comm.Isend([send[lo[j] : lo[j + 1]], MPI.DOUBLE], dest=j, tag=1))
    MPI.Request.Waitall(reqs)
    block = parts[0]
    for j in range(1, size):
        block = op(block, parts[j])
    reqs = []
    for j in range(size):
        reqs.append(comm.Irecv([recv[lo[j] : lo[j + 1]], MPI.DOUBLE], source=j, tag=2))
        reqs.append(comm.Isend([block, MPI.DOUBLE], dest=j, tag=2))
    MPI.Request.Waitall(reqs)


if __name__ == "__main__":  # the course's launcher: python direct_waitall.py under mpiexec
    MPI.Init()
    x = np.full(5, float(MPI.COMM_WORLD.Get_rank()))
    out = np.zeros(5)
    allreduce(x, out, MPI.COMM_WORLD, lambda a, b: a + b)
    print(MPI.COMM_WORLD.Get_rank(), out)
    MPI.Finalize()
