"""HW4, reduce, submission 11 (the course variant that returns the result: reduce(x, comm, op, root)).

Binomial tree towards the root with the lower-case (pickle) comm.send/comm.recv; returns the sum.
TA: BUG, every rank returns its `acc`: the root gets the right total, but the other ranks return their
partial sums where MPI (and mpi4py's comm.reduce) return None. At every p >= 2.
"""

from mpi4py import MPI  # noqa: F401


def reduce(x, comm, op, root=0):
    rank, size = comm.rank, comm.size
    rel = (rank - root) % size
    acc = x.copy()
    mask = 1
    while mask < size:
        if rel & mask:
            comm.send(acc, dest=(rel - mask + root) % size, tag=12)
            break
        if rel + mask < size:
            acc = op(acc, comm.recv(source=(rel + mask + root) % size, tag=12))
        mask <<= 1
    return acc
