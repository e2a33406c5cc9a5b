"""Ranks that disagree get a clear error on every rank from every allreduce a data-parallel step can use,
MPI's own ("mpi") included: MPI's Allreduce would return garbage for arrays of the same byte size."""

import numpy as np
import pytest

from collectives import MismatchError
from minidl import nn, optim
from minidl.distributed import DistributedOptimizer
from minidl.distributed.allreduce import ALGORITHMS, allreduce


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
    opt = DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), allreduce="mpi", comm=comm)
    with pytest.raises(MismatchError):
        opt.step()
