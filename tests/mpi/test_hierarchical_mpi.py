"""Hierarchical allreduce under mpiexec: nodes forced by ranks_per_node, and the real shared-memory nodes."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from collectives.algorithms.hierarchical import hierarchical_allreduce

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("k", [k for k in (1, 2, 3) if COMM.Get_size() % k == 0])
def test_equals_mpis_allreduce_with_forced_nodes(k):
    x = np.random.default_rng(COMM.Get_rank()).standard_normal(37)
    want = np.empty_like(x)
    COMM.Allreduce(x, want, op=MPI.SUM)
    got = hierarchical_allreduce(COMM, x, ranks_per_node=k)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    every = np.empty((COMM.Get_size(), x.size))
    COMM.Allgather(got, every)
    assert all(np.array_equal(row, got) for row in every)  # bitwise the same on every rank


def test_shared_memory_nodes():
    x = np.full(10, float(COMM.Get_rank()))
    got = hierarchical_allreduce(COMM, x)  # Split_type(COMM_TYPE_SHARED): one node on this machine
    np.testing.assert_array_equal(got, np.full(10, sum(range(COMM.Get_size())), dtype=float))
