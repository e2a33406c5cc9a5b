"""How a rank of a TimeoutComm waits under real MPI processes: busy-polling (no sleep) while the node has a core
for each rank, as MPICH's own blocking calls do; sleeping between tests where the ranks outnumber the cores, and
on a communication thread (minidl/distributed/timeout.py).

Rank 0 joins each call only once every other rank has made SPINS + 10 tests in it (they tell it on a communicator of
their own), so "past the spins" does not depend on how long a test takes: Open MPI's MPI_Test yields the core when
the node is oversubscribed, and under load 50 of them took longer than any fixed delay chosen for rank 0."""

import os
import threading
import time

import numpy as np
from mpi4py import MPI

from minidl.distributed import timeout
from minidl.distributed.timeout import SPINS, TimeoutComm
from minidl.tools.threads import ranks_on_this_node


def test_a_rank_busy_polls_only_where_every_rank_has_a_core(comm, monkeypatch):
    if comm.Get_size() < 2:
        return  # nothing to wait for
    wrapped = TimeoutComm(comm.Dup(), 20.0)
    spare = ranks_on_this_node() <= (os.cpu_count() or 1)
    assert wrapped.spins == (float("inf") if spare else SPINS)
    assert wrapped.Dup().spins == wrapped.spins  # a new communicator waits the same way

    slept: list[float] = []
    real_sleep = time.sleep
    monkeypatch.setattr(timeout.time, "sleep", lambda s: (slept.append(s), real_sleep(s)))
    x, out = np.ones(4), np.empty(4)
    side, tests, real_test = comm.Dup(), [0], timeout._test

    def counted_test(request, status):
        tests[0] += 1
        if comm.Get_rank() != 0 and tests[0] == SPINS + 10:
            side.Send(np.zeros(1), dest=0)  # past the spins: rank 0 may join
        return real_test(request, status)

    monkeypatch.setattr(timeout, "_test", counted_test)

    def late_rank_0(call):
        tests[0] = 0
        if comm.Get_rank() == 0:  # the others wait for rank 0 until each has tested SPINS + 10 times
            for _ in range(comm.Get_size() - 1):
                side.Recv(np.empty(1), source=MPI.ANY_SOURCE)
        call()

    late_rank_0(lambda: wrapped.Allreduce(x, out))
    if comm.Get_rank() != 0:
        assert bool(slept) == (not spare), f"{len(slept)} sleeps with {ranks_on_this_node()} ranks on this node"

    slept.clear()
    thread = threading.Thread(target=lambda: wrapped.Allreduce(x, out))
    late_rank_0(lambda: (thread.start(), thread.join()))
    if comm.Get_rank() != 0:
        assert slept, "a communication thread must sleep between tests (it shares the interpreter lock)"
    comm.Barrier()
    side.Free()


def test_the_in_process_communicator_never_busy_polls():
    import collectives

    res = collectives.simulate(2, lambda c: TimeoutComm(c, 5.0).spins)
    assert res[0] == res[1] == SPINS
    assert isinstance(MPI.COMM_WORLD, MPI.Comm)
