"""ZeRO stages 1-3 under mpiexec: bitwise equal to DistributedOptimizer (ring) on every rank."""

import numpy as np
import pytest
from helpers.zero import train
from mpi4py import MPI


@pytest.mark.parametrize("kind", ["sgd", "momentum", "adam"])
def test_zero_stages_equal_plain_data_parallelism(kind):
    comm = MPI.COMM_WORLD
    reference = train(comm, kind, None)
    for stage in (1, 2, 3):
        state = train(comm, kind, stage)
        for name, value in state.items():
            assert np.array_equal(value, reference[name]), f"stage {stage}, rank {comm.Get_rank()}, {name}"
