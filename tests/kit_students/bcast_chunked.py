"""HW4, broadcast, submission 11.

Small arrays: binomial tree. Arrays over 512 KiB: a pipelined chain 0 -> 1 -> ... (relative to the root)
in chunks of 65536 doubles, so that the chain's ranks forward while they receive.
TA: BUG, the chain sends n // 65536 chunks and drops the remainder: above 512 KiB (n > 65536, unless a
multiple of 65536) the last n % 65536 elements never reach the other ranks. Right at every n <= 65536.
"""

import numpy as np
from mpi4py import MPI

CHUNK = 65536


def broadcast(x, comm, root=0):
    rank, size = comm.Get_rank(), comm.Get_size()
    rel = (rank - root) % size
    buf = x.copy() if rank == root else np.zeros_like(x)
    if buf.nbytes <= 512 * 1024:
        mask = 1
        while mask < size:
            if rel & mask:
                comm.Recv(buf, source=(rel - mask + root) % size, tag=31)
                break
            mask <<= 1
        mask >>= 1
        while mask > 0:
            if rel + mask < size:
                comm.Send(buf, dest=(rel + mask + root) % size, tag=31)
            mask >>= 1
        return buf
    for c in range(len(buf) // CHUNK):
        piece = buf[c * CHUNK : (c + 1) * CHUNK]
        if rel > 0:
            comm.Recv([piece, MPI.DOUBLE], source=(rank - 1) % size, tag=32)
        if rel < size - 1:
            comm.Send([piece, MPI.DOUBLE], dest=(rank + 1) % size, tag=32)
    return buf
