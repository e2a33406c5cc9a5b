"""HW3, allreduce, submission 20.

Step s = 1 .. p // 2: send my input s ranks to the right and to the left, and receive from the ranks s to
the left and right (two Sendrecv); the rank straight opposite gets a single exchange. Sums the p inputs in
rank order.
TA: BUG, "straight opposite" is tested as `s == size // 2`, which is true at odd p too (it meant
2 * s == size). At odd p >= 3 the last step then sends to the right but waits for the right neighbour,
which sent further right: every rank waits forever, at every n. Right at even p.
"""

import numpy as np
from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.Get_rank(), comm.Get_size()
    parts = np.empty((size, len(send)))
    parts[rank] = send
    for s in range(1, size // 2 + 1):
        right, left = (rank + s) % size, (rank - s) % size
        if s == size // 2:
            comm.Sendrecv(send, dest=right, recvbuf=parts[right], source=right)
        else:
            comm.Sendrecv(send, dest=right, recvbuf=parts[left], source=left)
            comm.Sendrecv(send, dest=left, recvbuf=parts[right], source=right)
    total = parts[0]
    for r in range(1, size):
        total = op(total, parts[r])
    recv[:] = total
