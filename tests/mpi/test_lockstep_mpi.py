"""Ranks at different optimizer steps under real MPI processes (issue 27, failures 1 and 2): every rank raises
the same MismatchError naming each rank's call and step. Before lockstep.py each case hung without a word.

Each test runs on a TimeoutComm (20 s), so a regression shows as a CommTimeoutError, which the conftest turns
into a failed, aborted job, never as a hung CI run. The end of a process (atexit) is tested in
tests/test_lockstep_cli.py.
"""

import numpy as np
import pytest
from mpi4py import MPI

import minidl
import minidl.distributed as dist
from collectives import MismatchError
from minidl import nn, optim
from minidl.distributed import lockstep
from minidl.distributed.timeout import TimeoutComm

TIMEOUT = 20.0


@pytest.fixture
def tcomm(comm):
    if comm.Get_size() < 2:
        pytest.skip("needs two ranks")
    wrapped = TimeoutComm(comm.Dup(), TIMEOUT)
    yield wrapped
    lockstep.forget()  # these tests leave the ranks at different steps on purpose: nothing to agree on at exit
    comm.Barrier()


def train(model, opt, steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        opt.zero_grad()
        (model(minidl.tensor(rng.standard_normal((3, 4)))) ** 2).mean().backward()
        opt.step()


def make(tcomm, params=None, **options):
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
    chosen = list(model.parameters()) if params is None else list(model.parameters())[:params]
    return model, dist.DistributedOptimizer(optim.SGD(chosen, lr=0.1), comm=tcomm, **options)


@pytest.mark.parametrize("overlap", [False, True])
def test_a_rank_that_ends_early_fails_every_rank(tcomm, overlap):
    model, opt = make(tcomm, overlap=overlap)
    last = tcomm.Get_size() - 1
    with pytest.raises(MismatchError) as e:
        train(model, opt, 2 if tcomm.Get_rank() < last else 3)
        lockstep.end_of_run(tcomm, opt.updates)  # what dist.run and the end of the process do
    assert "ranks [0" in str(e.value) and "end of run (2 steps done)" in str(e.value), e.value
    assert f"ranks [{last}]: optimizer step 3" in str(e.value) and "evaluates alone" in str(e.value), e.value


def test_a_rank_that_evaluates_alone_fails_every_rank(tcomm):
    model, opt = make(tcomm)
    train(model, opt, 1)
    with pytest.raises(MismatchError) as e:
        if tcomm.Get_rank() == 0:
            dist.allreduce(tcomm, np.ones(1), "ring")  # the metric averaged "over the ranks", on rank 0 alone
        train(model, opt, 1)
    message = str(e.value)
    assert "ranks [0]: ring.allreduce" in message and "(1 step done)" in message, message
    assert "optimizer step 2" in message and "evaluates alone" in message, message


def test_add_param_group_on_one_rank_after_a_step_fails_every_rank(tcomm):
    model, opt = make(tcomm, params=2)
    train(model, opt, 1)
    with pytest.raises(MismatchError) as e:
        if tcomm.Get_rank() == 0:
            opt.add_param_group({"params": list(model.parameters())[2:]})
        train(model, opt, 1)
    assert "ranks [0]: add_param_group" in str(e.value) and "optimizer step 2" in str(e.value), e.value


def test_ranks_in_step_train_identically(tcomm):
    model, opt = make(tcomm)
    train(model, opt, 3)
    lockstep.end_of_run(tcomm, opt.updates)
    w = model[0].weight.data
    everyone = np.empty((tcomm.Get_size(), *w.shape), w.dtype)
    MPI.COMM_WORLD.Allgather(np.ascontiguousarray(w), everyone)
    assert (everyone == everyone[0]).all()
