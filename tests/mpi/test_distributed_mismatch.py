"""Ranks that disagree get a clear error on every rank from every allreduce a data-parallel step can use,
MPI's own ("mpi") included: MPI's Allreduce would return garbage for arrays of the same byte size; and
from SyncBatchNorm and broadcast_optimizer_state, where one rank's bad input or optimizer used to raise
on that rank alone and leave the others waiting."""

import numpy as np
import pytest

import minidl
from collectives import MismatchError
from minidl import nn, optim
from minidl.distributed import DistributedOptimizer, SyncBatchNorm, broadcast_optimizer_state
from minidl.distributed.data_parallel.allreduce import ALGORITHMS, allreduce


@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_allreduce_mismatch_raises_on_every_rank(comm, algorithm):
    # rank 0: 4 float32 values, the others: 2 float64 values (the same 16 bytes)
    x = np.ones(4, np.float32) if comm.Get_rank() == 0 else np.ones(2, np.float64)
    with pytest.raises(MismatchError, match="disagree"):
        allreduce(comm, x, algorithm)


def test_distributed_optimizer_mpi_with_different_models_raises(comm):
    model = nn.Linear(3, 2 + (comm.Get_rank() == 0))
    for p in model.parameters():
        p.grad = np.ones_like(p.data)
    with pytest.raises(MismatchError, match="first difference at parameter 0"):  # found when it is built
        DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), allreduce="mpi", comm=comm)


def test_sync_batchnorm_bad_input_on_one_rank_raises_on_every_rank(comm):
    """Rank 1 brings 5 channels to a 3-channel layer: every rank raises, none waits in the allreduce."""
    bn = SyncBatchNorm(3, dtype=np.float64, comm=comm)
    x = np.ones((4, 5 if comm.Get_rank() == 1 else 3, 2))
    with pytest.raises(MismatchError, match=r"rank 1: .*3 channels in dimension 1, got shape \(4, 5, 2\)"):
        bn(minidl.tensor(x))


def test_sync_batchnorm_empty_local_batch_takes_part(comm):
    """Rank 0's share of the batch is empty: it contributes zero counts, and every rank ends with the
    running statistics of the other ranks' examples."""
    bn = SyncBatchNorm(3, dtype=np.float64, comm=comm)
    rank = comm.Get_rank()
    xs = [np.random.default_rng(r).normal(size=(0 if r == 0 else 2, 3, 2)) for r in range(comm.Get_size())]
    x = minidl.tensor(xs[rank], requires_grad=True)
    y = bn(x)
    y.sum().backward()
    ref = nn.BatchNorm1d(3, dtype=np.float64)
    ref(minidl.tensor(np.concatenate(xs)))
    assert y.shape == xs[rank].shape and x.grad.shape == xs[rank].shape
    np.testing.assert_allclose(bn.running_mean, ref.running_mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var, ref.running_var, rtol=1e-12)


def test_broadcast_optimizer_state_of_another_class_raises_on_every_rank(comm):
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1) if comm.Get_rank() == 1 else optim.Adam(model.parameters(), lr=0.1)
    with pytest.raises(ValueError, match="optimizer class: Adam on the root.*SGD here"):
        broadcast_optimizer_state(opt, comm=comm)
