"""Overlap under mpiexec: allreduces from the communication thread, bitwise equal to the plain path."""

import numpy as np
import pytest
from helpers.overlap import run
from mpi4py import MPI


@pytest.mark.parametrize("fusion_bytes", [0, 200, 64 << 20])
def test_overlap_under_mpi_is_bitwise_the_same(fusion_bytes):
    comm = MPI.COMM_WORLD
    plain, _, _ = run(comm, False, fusion_bytes)
    over, launched, buckets = run(comm, True, fusion_bytes)
    for name in plain:
        assert np.array_equal(plain[name], over[name]), name
    assert all(n == buckets for n in launched)
