"""Hierarchical allreduce under mpiexec, both schedules: nodes forced by ranks_per_node, and the real shared-memory
nodes."""

from __future__ import annotations

import numpy as np
import pytest
from mpi4py import MPI

from collectives.nodes import SCHEDULES, hierarchical_allreduce

COMM = MPI.COMM_WORLD


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("k", [k for k in (1, 2, 3, 4, 5) if COMM.Get_size() % k == 0])
def test_equals_mpis_allreduce_with_forced_nodes(k, schedule):
    x = np.random.default_rng(COMM.Get_rank()).standard_normal(37)
    want = np.empty_like(x)
    COMM.Allreduce(x, want, op=MPI.SUM)
    got = hierarchical_allreduce(COMM, x, ranks_per_node=k, schedule=schedule)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    every = np.empty((COMM.Get_size(), x.size))
    COMM.Allgather(got, every)
    assert all(np.array_equal(row, got) for row in every)  # bitwise the same on every rank


@pytest.mark.parametrize("schedule", SCHEDULES)
def test_shared_memory_nodes(schedule):
    x = np.full(10, float(COMM.Get_rank()))
    got = hierarchical_allreduce(COMM, x, schedule=schedule)  # Split_type(COMM_TYPE_SHARED): one node here
    np.testing.assert_array_equal(got, np.full(10, sum(range(COMM.Get_size())), dtype=float))


@pytest.mark.parametrize("schedule", SCHEDULES)
@pytest.mark.parametrize("op", ["max", "min", "prod"])
def test_integer_ops_are_exact(schedule, op):
    k = 2 if COMM.Get_size() % 2 == 0 else 1
    x = np.random.default_rng(COMM.Get_rank()).integers(-3, 4, 25).astype(np.int32)
    want = np.empty_like(x)
    COMM.Allreduce(x, want, op={"max": MPI.MAX, "min": MPI.MIN, "prod": MPI.PROD}[op])
    np.testing.assert_array_equal(hierarchical_allreduce(COMM, x, op, ranks_per_node=k, schedule=schedule), want)
