"""HW3, ring allreduce, submission 28.

The course template's globals: RANK and SIZE read from MPI.COMM_WORLD at import. The ring (Sendrecv of
whole vectors, summed in rank order) uses them to find its neighbours and to file what arrives.
TA: BUG, the function must work on the communicator it is given. On COMM_WORLD (or a duplicate) it is right;
on any communicator whose ranks differ from COMM_WORLD's (a Split, ranks reordered) it sends to and
waits for the wrong ranks: at p >= 3 every rank waits forever (at p = 2 the neighbours coincide).
"""

import numpy as np
from mpi4py import MPI

RANK = MPI.COMM_WORLD.Get_rank()
SIZE = MPI.COMM_WORLD.Get_size()


def allreduce(send, recv, comm, op):
    parts = np.empty((SIZE, len(send)))
    parts[RANK] = send
    travelling = send.copy()
    incoming = np.empty_like(travelling)
    for step in range(SIZE - 1):
        comm.Sendrecv(travelling, dest=(RANK + 1) % SIZE, recvbuf=incoming, source=(RANK - 1) % SIZE)
        travelling, incoming = incoming, travelling
        parts[(RANK - step - 1) % SIZE] = travelling
    total = parts[0]
    for r in range(1, SIZE):
        total = op(total, parts[r])
    recv[:] = total
