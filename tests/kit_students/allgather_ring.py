"""HW4, allgather, submission 01.

recv holds p blocks of n; the ring sends block s of recv and receives block r of the same array with one
Sendrecv (two disjoint slices of one array: legal).
TA: correct.
"""

from mpi4py import MPI  # noqa: F401


def allgather(send, recv, comm):
    rank, size = comm.Get_rank(), comm.Get_size()
    n = len(send)
    recv[rank * n : (rank + 1) * n] = send
    right, left = (rank + 1) % size, (rank - 1) % size
    for step in range(size - 1):
        s, r = (rank - step) % size, (rank - step - 1) % size
        comm.Sendrecv(recv[s * n : (s + 1) * n], dest=right, recvbuf=recv[r * n : (r + 1) * n], source=left)
