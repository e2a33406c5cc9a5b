"""HW3, ring allreduce, submission 03.

Passes (origin, vector) pairs around the ring with the lower-case, pickle-based isend/recv, waits with
req.wait(), sums the p vectors in rank order (so every rank gets the same bits), ends with comm.barrier().
TA: correct (slow: whole vectors travel, but right).
"""

from mpi4py import MPI  # noqa: F401


def allreduce(send, recv, comm, op):
    rank, size = comm.rank, comm.size
    parts = [None] * size
    parts[rank] = send.copy()
    message = (rank, send.copy())
    for _ in range(size - 1):
        req = comm.isend(message, dest=(rank + 1) % size, tag=7)
        message = comm.recv(source=(rank - 1) % size, tag=7)
        req.wait()
        parts[message[0]] = message[1]
    total = parts[0]
    for part in parts[1:]:
        total = op(total, part)
    recv[:] = total
    comm.barrier()
