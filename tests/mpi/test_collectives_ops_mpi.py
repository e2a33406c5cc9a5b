"""The rest of MPI's collectives under mpiexec against the MPI library's own calls on the same data:
barrier, Alltoall(v), Allgatherv, Gatherv, Scatterv, Reduce_scatter with counts, Scan, Exscan, the
logical and bitwise ops, MAXLOC/MINLOC, and integer sums that overflow.

Hypothesis is derandomized (tests/mpi/conftest.py), so every rank draws the same example.
"""

import time

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes
from mpi4py import MPI

import collectives
from collectives.testing import rank_data

MPI_OPS = {
    "sum": MPI.SUM,
    "prod": MPI.PROD,
    "max": MPI.MAX,
    "min": MPI.MIN,
    "land": MPI.LAND,
    "lor": MPI.LOR,
    "lxor": MPI.LXOR,
    "band": MPI.BAND,
    "bor": MPI.BOR,
    "bxor": MPI.BXOR,
}
ALLREDUCE = collectives.ALGORITHMS + ("auto",)


def mpi_allreduce(comm, x, op):
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=MPI_OPS[op])
    return out


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
@pytest.mark.parametrize("op", ["sum", "prod"])
def test_integer_overflow_wraps_as_mpi_does(comm, dtype, op):
    # every rank brings values near the top of the range: the true sum and product overflow
    top = np.iinfo(dtype).max
    x = np.array([top, top - comm.Get_rank(), 3, 1 << 6, 100], dtype)
    ref = mpi_allreduce(comm, x, op)
    for algorithm in ALLREDUCE:
        np.testing.assert_array_equal(collectives.allreduce(comm, x, op, algorithm), ref)


@settings(max_examples=20)
@given(
    dtype=st.sampled_from(["bool", "int8", "int32", "uint16", "uint64"]),
    op=st.sampled_from(["land", "lor", "lxor", "band", "bor", "bxor"]),
    shape=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=6),
    algorithm=st.sampled_from(ALLREDUCE),
    seed=st.integers(0, 2**32 - 1),
)
def test_logical_and_bitwise_ops_match_mpi(comm, dtype, op, shape, algorithm, seed):
    x = rank_data(seed, comm.Get_rank(), shape, dtype)
    x = np.where(np.random.default_rng([seed, comm.Get_rank(), 1]).random(shape) < 0.3, 0, x).astype(dtype)
    if dtype == "bool" and op.startswith("b"):  # MPI's bitwise ops take integers, not C_BOOL
        ref = mpi_allreduce(comm, x.astype(np.uint8), op).astype(bool)
    else:
        ref = mpi_allreduce(comm, x, op)
    out = collectives.allreduce(comm, x, op, algorithm)
    assert out.dtype == x.dtype
    np.testing.assert_array_equal(out, ref)


LOC_TYPES = {"float32": MPI.FLOAT_INT, "float64": MPI.DOUBLE_INT, "int32": MPI.INT_INT, "int16": MPI.SHORT_INT}


@settings(max_examples=20)
@given(
    value_dtype=st.sampled_from(list(LOC_TYPES)),
    op=st.sampled_from(["maxloc", "minloc"]),
    n=st.integers(0, 9),
    algorithm=st.sampled_from(ALLREDUCE),
    seed=st.integers(0, 1000),
)
def test_maxloc_minloc_match_mpi(comm, value_dtype, op, n, algorithm, seed):
    rng = np.random.default_rng([seed, comm.Get_rank()])
    x = collectives.pairs(rng.integers(-3, 4, n).astype(value_dtype), rng.integers(0, 6, n), mpi_layout=True)
    ref = np.empty_like(x)
    mpi_type = LOC_TYPES[value_dtype]
    comm.Allreduce([x, mpi_type], [ref, mpi_type], op=MPI.MAXLOC if op == "maxloc" else MPI.MINLOC)
    out = collectives.allreduce(comm, x, op, algorithm)
    np.testing.assert_array_equal(out["value"], ref["value"])
    np.testing.assert_array_equal(out["index"], ref["index"])


def test_barrier_waits_for_the_last_rank(comm):
    collectives.barrier(comm)
    t0 = time.perf_counter()
    if comm.Get_rank() == comm.Get_size() - 1:
        time.sleep(0.3)
    collectives.barrier(comm)
    assert time.perf_counter() - t0 >= 0.25  # no rank left before the sleeper arrived
    comm.Barrier()


@settings(max_examples=15)
@given(
    rest=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4),
    algorithm=st.sampled_from(["pairwise", "bruck", "auto"]),
    seed=st.integers(0, 1000),
)
def test_alltoall_matches_mpi(comm, rest, algorithm, seed):
    p = comm.Get_size()
    x = rank_data(seed, comm.Get_rank(), (p, *rest), "int64")
    ref = np.empty_like(x)
    comm.Alltoall(x, ref)
    np.testing.assert_array_equal(collectives.alltoall(comm, x, algorithm), ref)


@settings(max_examples=15)
@given(seed=st.integers(0, 1000))
def test_alltoallv_matches_mpi(comm, seed):
    p, rank = comm.Get_size(), comm.Get_rank()
    counts = np.random.default_rng(seed).integers(0, 4, (p, p))  # the same matrix on every rank
    x = rank_data(seed, rank, (int(counts[rank].sum()),), "float64")
    ref = np.empty(int(counts[:, rank].sum()))
    comm.Alltoallv([x, counts[rank].tolist()], [ref, counts[:, rank].tolist()])
    out, received = collectives.alltoallv(comm, x, counts[rank])
    np.testing.assert_array_equal(out, ref)
    assert received == counts[:, rank].tolist()


@settings(max_examples=15)
@given(root=st.integers(0, 7), seed=st.integers(0, 1000))
def test_v_collectives_match_mpi(comm, root, seed):
    p, rank = comm.Get_size(), comm.Get_rank()
    root %= p
    counts = np.random.default_rng(seed).integers(0, 5, p).tolist()
    x = rank_data(seed, rank, (counts[rank],), "int32")

    ref = np.empty(sum(counts), np.int32)
    comm.Allgatherv(x, [ref, counts])
    out, got = collectives.allgatherv(comm, x)
    np.testing.assert_array_equal(out, ref)
    assert got == counts

    gathered = np.empty(sum(counts), np.int32) if rank == root else None
    comm.Gatherv(x, [gathered, counts] if rank == root else None, root=root)
    out, _ = collectives.gatherv(comm, x, root=root)
    if rank == root:
        np.testing.assert_array_equal(out, gathered)
    else:
        assert out is None

    whole = ref  # every rank's part, end to end
    mine = np.empty(counts[rank], np.int32)
    comm.Scatterv([whole, counts] if rank == root else None, mine, root=root)
    out = collectives.scatterv(comm, whole if rank == root else None, counts if rank == root else None, root=root)
    np.testing.assert_array_equal(out, mine)

    y = rank_data(seed, rank, (sum(counts),), "int64")
    ref = np.empty(counts[rank], np.int64)
    comm.Reduce_scatter(y, ref, recvcounts=counts, op=MPI.SUM)
    for algorithm in ("ring", "recursive_halving"):
        np.testing.assert_array_equal(collectives.reduce_scatter(comm, y, "sum", algorithm, counts=counts), ref)


@settings(max_examples=20)
@given(
    case=st.sampled_from([("int32", "sum"), ("int64", "prod"), ("int16", "max"), ("uint8", "bxor"), ("int8", "lor")]),
    shape=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=5),
    seed=st.integers(0, 2**32 - 1),
)
def test_scan_and_exscan_match_mpi(comm, case, shape, seed):
    dtype, op = case
    x = rank_data(seed, comm.Get_rank(), shape, dtype, op)
    ref = np.empty_like(x)
    comm.Scan(x, ref, op=MPI_OPS[op])
    np.testing.assert_array_equal(collectives.scan(comm, x, op), ref)
    ref = np.zeros_like(x)
    comm.Exscan(x, ref, op=MPI_OPS[op])
    out = collectives.exscan(comm, x, op)
    if comm.Get_rank() == 0:
        assert out is None  # MPI leaves rank 0's buffer undefined
    else:
        np.testing.assert_array_equal(out, ref)


def test_disagreements_raise_on_every_rank_and_leave_the_communicator_usable(comm):
    rank, p = comm.Get_rank(), comm.Get_size()
    odd = rank == p - 1
    with pytest.raises(collectives.MismatchError, match=rf"ranks \[{p - 1}\]"):
        collectives.alltoall(comm, np.ones((p, 2), np.float32 if odd else np.float64))
    with pytest.raises(collectives.MismatchError):
        collectives.scan(comm, np.ones(3), "max" if odd else "sum")
    with pytest.raises(collectives.MismatchError):
        collectives.reduce_scatter(comm, np.ones(p + 1), counts=[1] * (p - 1) + [2] if odd else [2] + [1] * (p - 1))
    with pytest.raises(collectives.MismatchError):
        (collectives.barrier if odd else lambda c: collectives.allreduce(c, np.ones(2)))(comm)
    np.testing.assert_array_equal(collectives.allreduce(comm, np.ones(3)), np.full(3, p))
