"""collectives under mpiexec against MPI's own collectives on the same data.

Hypothesis is derandomized (tests/mpi/conftest.py), so every rank draws the same example; each
rank derives its array from the drawn seed and its rank.
"""

import zlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes
from mpi4py import MPI

import collectives
from collectives.testing import SUPPORTED_KINDS, rank_data

MPI_OPS = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
BOOL_OPS = {"max": MPI.LOR, "min": MPI.LAND}  # MPI has no MAX/MIN for C bool; or/and are the same thing
DTYPES = ["int8", "int32", "int64", "uint16", "uint64", "float16", "float32", "float64", "complex128", "bool"]


def mpi_allreduce(comm, x, op):
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=(BOOL_OPS if x.dtype == bool else MPI_OPS)[op])
    return out


def same_bits_everywhere(comm, out):
    """Every rank's result has the same bytes: compare checksums with a buffer-based Allgather."""
    crc = np.array([zlib.crc32(out.tobytes())], dtype=np.int64)
    crcs = np.empty(comm.Get_size(), dtype=np.int64)
    comm.Allgather(crc, crcs)
    return len(set(crcs.tolist())) == 1


def assert_close_to_mpi(out, ref, x, op, p):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    if x.dtype.kind in "biu" or op in ("max", "min"):
        np.testing.assert_array_equal(out, ref)
        return
    # Both are some order of the same p operations, each within (p - 1) eps of the truth: relative to
    # sum|x_i| <= p * 4 * sqrt(2) for sums of |x| <= 4 (complex), relative to |result| for products.
    eps = np.finfo(x.dtype).eps
    scale = p * 4 * np.sqrt(2) if op == "sum" else 2 * np.abs(ref.astype(np.complex128))
    err = np.abs(out.astype(np.complex128) - ref.astype(np.complex128))
    assert np.all(err <= 2 * p * eps * scale), err.max()


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    op = draw(st.sampled_from([o for o, kinds in SUPPORTED_KINDS.items() if np.dtype(dtype).kind in kinds]))
    shape = draw(array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=7))
    return dtype, op, shape, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=25)
@given(case=cases(), algorithm=st.sampled_from(collectives.ALGORITHMS + ("auto",)))
def test_allreduce_matches_mpi_allreduce(comm, case, algorithm):
    dtype, op, shape, seed = case
    p, rank = comm.Get_size(), comm.Get_rank()
    x = rank_data(seed, rank, shape, dtype, op)
    before = x.copy()
    out = collectives.allreduce(comm, x, op=op, algorithm=algorithm)
    np.testing.assert_array_equal(x, before)
    assert not np.shares_memory(x, out)
    assert same_bits_everywhere(comm, out)
    assert_close_to_mpi(out, mpi_allreduce(comm, x, op), x, op, p)


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
@pytest.mark.parametrize("n", [0, 1, 3, 1000, 65537])
def test_every_algorithm_exact_on_integer_valued_floats(comm, algorithm, n):
    x = np.random.default_rng([n, comm.Get_rank()]).integers(-8, 8, n).astype(np.float32)
    out = collectives.allreduce(comm, x, algorithm=algorithm)
    np.testing.assert_array_equal(out, mpi_allreduce(comm, x, "sum"))


@settings(max_examples=15)
@given(
    shape=array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=6),
    root=st.integers(0, 7),
    seed=st.integers(0, 1000),
)
def test_building_blocks_match_mpi(comm, shape, root, seed):
    p, rank = comm.Get_size(), comm.Get_rank()
    root %= p
    x = rank_data(seed, rank, shape, "int64", "sum")

    ref = x.copy()
    comm.Bcast(ref, root=root)
    np.testing.assert_array_equal(collectives.broadcast(comm, x if rank == root else None, root=root), ref)

    ref = np.empty_like(x)
    comm.Reduce(x, ref, op=MPI.MAX, root=root)
    red = collectives.reduce(comm, x, "max", root=root)
    if rank == root:
        np.testing.assert_array_equal(red, ref)
    else:
        assert red is None

    counts = [len(c) for c in np.array_split(np.arange(x.size), p)]
    ref = np.empty(counts[rank], dtype=x.dtype)
    comm.Reduce_scatter(x.reshape(-1), ref, recvcounts=counts, op=MPI.SUM)
    for algorithm in ("ring", "recursive_halving"):
        np.testing.assert_array_equal(collectives.reduce_scatter(comm, x, "sum", algorithm=algorithm), ref)

    ref = np.empty((p, *x.shape), dtype=x.dtype)
    comm.Allgather(x, ref)
    for algorithm in ("ring", "recursive_doubling"):
        np.testing.assert_array_equal(collectives.allgather(comm, x, algorithm=algorithm), ref)

    gathered = collectives.gather(comm, x, root=root)
    if rank == root:
        np.testing.assert_array_equal(gathered, ref)
    rows = np.stack([rank_data(seed, r, shape, "int64", "sum") for r in range(p)])
    np.testing.assert_array_equal(collectives.scatter(comm, rows if rank == root else None, root=root), x)


@pytest.mark.parametrize("n", [4, 5000])  # 5000 doubles: past recursive doubling's 16 KiB inline data
@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS + ("auto",))
def test_mismatched_sizes_raise_on_every_rank(comm, algorithm, n):
    rank, p = comm.Get_rank(), comm.Get_size()
    x = np.ones(n + 1 if rank == p - 1 else n, dtype=np.float64)
    with pytest.raises(collectives.MismatchError, match=rf"ranks \[{p - 1}\]"):
        collectives.allreduce(comm, x, algorithm=algorithm)
    # and the communicator still works afterwards
    np.testing.assert_array_equal(collectives.allreduce(comm, np.ones(3), algorithm=algorithm), np.full(3, p))


def test_mismatched_dtypes_raise_on_every_rank(comm):
    x = np.ones(4, dtype=np.float64 if comm.Get_rank() == 0 else np.float32)
    with pytest.raises(collectives.MismatchError, match="float64"):
        collectives.allreduce(comm, x)


@pytest.mark.parametrize("what", ["dtype", "op", "algorithm"])
def test_short_checked_allreduce_detects_any_disagreement(comm, what):
    # 1 KiB on every rank: recursive doubling with the data in the handshake. float32 vs int32 and
    # "sum" vs "max" bring the same bytes (only the headers differ); 4 MiB on the last rank makes
    # "auto" choose another algorithm there, which checks with a handshake without data.
    rank, p = comm.Get_rank(), comm.Get_size()
    odd = rank == p - 1
    x = np.ones(1 << 20 if odd and what == "algorithm" else 256, np.int32 if odd and what == "dtype" else np.float32)
    with pytest.raises(collectives.MismatchError, match=rf"ranks \[{p - 1}\]"):
        collectives.allreduce(comm, x, op="max" if odd and what == "op" else "sum")
    np.testing.assert_array_equal(collectives.allreduce(comm, np.ones(256, np.float32)), np.full(256, p, np.float32))


def test_short_allreduce_plans_on_mpi_communicators(comm):
    # fastpath.py on mpi4py: persistent requests per plan, one plan per (communicator, shape, dtype, op);
    # calls alternating between communicators and arrays, mismatches between them, then the plans freed
    from collectives import fastpath
    from collectives.dispatch import ALLREDUCE

    rank, p = comm.Get_rank(), comm.Get_size()
    other = comm.Dup()
    try:
        for i in range(6):
            c = other if i % 2 else comm
            for dtype, op, shape in [("float32", "sum", (256,)), ("int64", "max", (3, 5)), ("uint8", "bxor", ())]:
                x = rank_data(i, rank, shape, dtype, op)
                x = x[::-1] if x.ndim == 1 else x  # a strided view takes the plan too
                out = collectives.allreduce(c, x, op=op)
                ref = ALLREDUCE["recursive_doubling"](c, x, op, True)
                assert out.tobytes() == ref.tobytes() and out.shape == x.shape and out.dtype == x.dtype
                assert same_bits_everywhere(comm, out)
                if op != "bxor":
                    np.testing.assert_array_equal(out, mpi_allreduce(c, np.ascontiguousarray(x), op))
            if i % 3 == 2:
                bad = np.ones(257 if rank == p - 1 else 256, np.float32)
                with pytest.raises(collectives.MismatchError, match=rf"ranks \[{p - 1}\]"):
                    collectives.allreduce(c, bad)
    finally:
        fastpath.clear()  # frees the plans' persistent requests (MPI would warn at exit of any left)
        other.Free()
    np.testing.assert_array_equal(collectives.allreduce(comm, np.ones(4)), np.full(4, p))


def test_unsupported_op_dtype_pairs_raise_on_every_rank(comm):
    with pytest.raises(TypeError, match="complex"):
        collectives.allreduce(comm, np.ones(3, np.complex64), op="max")
    with pytest.raises(TypeError, match="bool"):
        collectives.allreduce(comm, np.ones(3, bool), op="sum")


def test_calibrate_agrees_on_every_rank(comm):
    before = collectives.cost.get_params()
    try:
        params = collectives.cost.calibrate(comm, large=1 << 16, repeats=3)
    finally:
        collectives.cost.set_params(before)
    mine = params.as_array()
    root = mine.copy()
    comm.Bcast(root, root=0)
    np.testing.assert_array_equal(mine, root)
