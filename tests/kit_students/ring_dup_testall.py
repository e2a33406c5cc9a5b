"""HW3, ring allreduce, submission 10.

Works on its own duplicate of the communicator (comm.Dup(), freed at the end) so its messages never meet the
caller's; polls its Isend/Irecv pairs with MPI.Request.Testall and uses Iprobe to wait for the first message.
TA: correct (busy-polls, which a real cluster does not love, but right).
"""

import numpy as np
from mpi4py import MPI


def allreduce(send, recv, comm, op):
    own = comm.Dup()
    rank, size = own.Get_rank(), own.Get_size()
    n = len(send)
    lo = [r * n // size for r in range(size + 1)]
    recv[:] = send
    tmp = np.empty(n // size + 1)
    right, left = (rank + 1) % size, (rank - 1) % size
    if size > 1:
        hello = own.Isend(np.zeros(1), dest=right, tag=99)  # a hello to the right neighbour
        while not own.Iprobe(source=left, tag=99):
            pass
        own.Recv(np.empty(1), source=left, tag=99)
        hello.Wait()
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        m = lo[r + 1] - lo[r]
        reqs = [own.Irecv(tmp[:m], source=left, tag=1), own.Isend(recv[lo[s] : lo[s + 1]], dest=right, tag=1)]
        while not MPI.Request.Testall(reqs):
            pass
        recv[lo[r] : lo[r + 1]] = op(recv[lo[r] : lo[r + 1]], tmp[:m])
    for step in range(size - 1):
        s, r = (rank + 1 - step) % size, (rank - step) % size
        reqs = [
            own.Irecv(recv[lo[r] : lo[r + 1]], source=left, tag=2),
            own.Isend(recv[lo[s] : lo[s + 1]], dest=right, tag=2),
        ]
        while not MPI.Request.Testall(reqs):
            pass
    own.Free()
