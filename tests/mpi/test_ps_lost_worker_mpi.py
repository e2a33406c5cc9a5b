"""Under mpiexec -n P (P >= 3): a parameter server that outlives a worker that stops answering (``lost_after``).

The last worker stops after 2 steps without a word (as a lost node would, but alive, so MPI does not end the
job). Asynchronous: the server goes on and ends when the other workers finish. Synchronous: with
``drop_lost_workers`` the steps average the workers left; without, ``LostWorkerError`` names the silent ones.
"""

import re

import pytest
from helpers.parameter_server import OPTIMIZERS, loss_on, make_model, worker_batch

import minidl.distributed as dist
from minidl.distributed.parameter_server.server import LostWorkerError

STEPS, LOST_AFTER = 6, 15.0  # seconds: well above a step with 5 ranks on a busy 2-core machine


def run(comm, asynchronous: bool, drop: bool, stops: set[int]):
    """Rank 0 serves; a worker in ``stops`` leaves after 2 steps; returns the server's stats (or its error), and on
    a worker that finished, the workers the server lost."""
    dist.init(comm)
    model, P = make_model(), comm.Get_size()
    result = None
    if comm.Get_rank() == 0:
        server = dist.ParameterServer(
            model,
            OPTIMIZERS["plain"],
            comm,
            1,
            asynchronous=asynchronous,
            lost_after=LOST_AFTER,
            drop_lost_workers=drop,
        )
        try:
            result = server.serve()
        except LostWorkerError as e:
            result = e
    else:
        worker = dist.PSWorker(model, comm, 1, asynchronous=asynchronous)
        for t in range(2 if comm.Get_rank() in stops else STEPS):
            worker.zero_grad()
            loss_on(model, worker_batch(t, comm.Get_rank() - 1, P - 1, 8)).backward()
            worker.step()
        if comm.Get_rank() not in stops:
            result = worker.close()  # the workers the server lost, from its FINISH message
    comm.Barrier()
    return result


def needs_three(comm):
    if comm.Get_size() < 3:
        pytest.skip("a lost worker and one that goes on need 3 ranks")


def test_async_server_goes_on_without_a_silent_worker(comm):
    needs_three(comm)
    P = comm.Get_size()
    stats = run(comm, asynchronous=True, drop=False, stops={P - 1})
    if comm.Get_rank() == 0:
        assert stats.lost == [P - 1]
        assert stats.updates == 2 + STEPS * (P - 2)
    elif comm.Get_rank() < P - 1:
        assert stats == [P - 1]  # every worker left knows


def test_sync_server_drops_a_lost_worker_when_told(comm):
    needs_three(comm)
    P = comm.Get_size()
    stats = run(comm, asynchronous=False, drop=True, stops={P - 1})
    if comm.Get_rank() == 0:
        assert stats.lost == [P - 1] and stats.rounds == STEPS
    elif comm.Get_rank() < P - 1:
        assert stats == [P - 1]


def test_sync_server_names_lost_workers_otherwise(comm):
    needs_three(comm)
    P = comm.Get_size()
    error = run(comm, asynchronous=False, drop=False, stops=set(range(1, P)))
    if comm.Get_rank() == 0:
        assert isinstance(error, LostWorkerError)
        named = re.search(rf"\(synchronous\): worker\(s\) ([\d, ]+) sent nothing for {LOST_AFTER:g} s", str(error))
        assert named and {int(w) for w in named.group(1).split(", ")} <= set(range(1, P))
