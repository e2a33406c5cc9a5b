"""HW3, allreduce, submission 27.

A pickle-based ring with the lower-case calls: comm.sendrecv for the ring steps, then a check round of
irecv/isend with MPI.Request.waitall; receives the check with ANY_TAG and reads the tag from an MPI.Status.
Times itself with MPI.Wtime() into a module-level variable and notes MPI.Get_processor_name().
TA: correct.
"""

from mpi4py import MPI

WORLD = MPI.COMM_WORLD  # the course template's global; the function uses the comm it is given
last_call = {"seconds": 0.0, "host": ""}


def allreduce(send, recv, comm, op):
    start = MPI.Wtime()
    rank, size = comm.Get_rank(), comm.Get_size()
    parts = {rank: send.copy()}
    travelling = (rank, send.copy())
    for _ in range(size - 1):
        travelling = comm.sendrecv(travelling, dest=(rank + 1) % size, source=(rank - 1) % size)
        parts[travelling[0]] = travelling[1]
    total = parts[0]
    for r in range(1, size):
        total = op(total, parts[r])
    # check round: my left neighbour must have got the same number of parts
    reqs = [comm.isend(len(parts), dest=(rank + 1) % size, tag=40 + rank)]
    status = MPI.Status()
    got = comm.recv(source=(rank - 1) % size, tag=MPI.ANY_TAG, status=status)
    assert got == size and status.Get_tag() == 40 + (rank - 1) % size, "ring out of step"
    MPI.Request.waitall(reqs)
    recv[:] = total
    last_call.update(seconds=MPI.Wtime() - start, host=MPI.Get_processor_name())
