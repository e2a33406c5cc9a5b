"""The rest of MPI's collectives on the simulated communicator, against NumPy (odd rank counts included):
barrier, alltoall(v), allgatherv/gatherv/scatterv, reduce_scatter with counts, scan/exscan, the logical
and bitwise ops, maxloc/minloc; full shapes in the agreement check; integer sums that wrap."""

import zlib

import numpy as np
import pytest
from helpers.ranks import errors_on_every_rank
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import collectives
from collectives.common import LOGICAL, OPS, TAG_ALLTOALL, TAG_BARRIER, bounds_of
from collectives.testing import rank_data

INTS = ["bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
ALLREDUCE = collectives.ALGORITHMS + ("auto",)


def reference(op, arrays):
    """NumPy's reduction of the arrays (a list), in their dtype; one array is its own reduction, as in MPI
    (a logical op over one rank leaves 2 as 2, not 1)."""
    stacked = np.stack(arrays)
    if len(arrays) == 1:
        return arrays[0]
    if op in ("maxloc", "minloc"):
        return loc_reference(op, stacked)
    return OPS[op].reduce(stacked, axis=0).astype(stacked.dtype)


def loc_reference(op, stacked):
    """MPI's rule: the best value, and the smallest index among the pairs holding it."""
    values, index = stacked["value"], stacked["index"]
    best = values.max(axis=0) if op == "maxloc" else values.min(axis=0)
    big = np.iinfo(index.dtype).max
    out = np.empty(stacked.shape[1:], stacked.dtype)
    out["value"], out["index"] = best, np.where(values == best, index, big).min(axis=0)
    return out


def pair_data(seed, rank, shape, value_dtype="int16"):
    rng = np.random.default_rng([seed, rank, 7])
    values = rng.integers(-3, 4, shape).astype(value_dtype)  # few values: many ties
    return collectives.pairs(values, rng.integers(0, 5, shape))


# -- the agreement check compares full shapes; integers wrap -----------------------------------------
def test_shapes_of_many_dims_are_compared_in_full_not_through_a_checksum():
    # two empty 8-d shapes, equal in size, bytes and their first 4 dims, whose CRC32s collide: the old
    # header (4 dims and a CRC32 of the shape) could not tell them apart
    a, b = (1, 1, 1, 1, 110018, 561318, 504098, 0), (1, 1, 1, 1, 226877, 443062, 612074, 0)
    assert zlib.crc32(np.asarray(a, "<i8").tobytes()) == zlib.crc32(np.asarray(b, "<i8").tobytes())
    for algorithm in ALLREDUCE:
        msg = errors_on_every_rank(
            3,
            lambda comm, algorithm=algorithm: collectives.allreduce(
                comm, np.empty(b if comm.Get_rank() == 1 else a), algorithm=algorithm
            ),
            collectives.MismatchError,
        )
        assert str(a) in msg and str(b) in msg


@settings(max_examples=30)
@given(p=st.integers(2, 5), shape=array_shapes(min_dims=5, max_dims=9, min_side=1, max_side=3), data=st.data())
def test_any_difference_in_a_long_shape_is_a_mismatch(p, shape, data):
    other = data.draw(st.permutations(shape).filter(lambda s: tuple(s) != shape), label="other")
    msg = errors_on_every_rank(
        p,
        lambda comm: collectives.allreduce(comm, np.zeros(other if comm.Get_rank() == p - 1 else shape)),
        collectives.MismatchError,
    )
    assert f"ranks [{p - 1}]: " in msg and f"with shape {tuple(other)}" in msg


@pytest.mark.parametrize("dtype", ["int8", "int16", "int32", "int64", "uint8", "uint32", "uint64"])
@pytest.mark.parametrize("algorithm", ALLREDUCE)
def test_integer_sums_and_products_wrap_as_numpy_does(dtype, algorithm):
    top = np.iinfo(dtype).max
    xs = [np.array([top, top - r, 3, 1 << 6], dtype) for r in range(5)]
    for op in ("sum", "prod"):
        res = collectives.simulate(
            5, lambda comm, op=op: collectives.allreduce(comm, xs[comm.Get_rank()], op, algorithm)
        )
        with np.errstate(over="ignore"):
            wrapped = OPS[op].reduce(np.stack(xs), axis=0, dtype=dtype)
        assert all(np.array_equal(out, wrapped) for out in res)


def test_int8_100_plus_100_is_minus_56_everywhere():
    res = collectives.simulate(2, lambda comm: collectives.allreduce(comm, np.array([100], np.int8)))
    assert [out.tolist() for out in res] == [[-56], [-56]]


# -- logical, bitwise, maxloc/minloc ------------------------------------------------------------------
@settings(max_examples=80)
@given(
    p=st.integers(1, 9),
    dtype=st.sampled_from(INTS),
    op=st.sampled_from(LOGICAL),
    shape=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=5),
    algorithm=st.sampled_from(ALLREDUCE),
    seed=st.integers(0, 2**32 - 1),
)
def test_logical_and_bitwise_allreduce(p, dtype, op, shape, algorithm, seed):
    xs = [rank_data(seed, r, shape, dtype) for r in range(p)]
    if op.startswith("l"):  # make zeros common, so that and/or/xor all have work to do
        xs = [np.where(x.astype(bool) & (np.arange(x.size).reshape(shape) % 3 == 0), 0, x).astype(dtype) for x in xs]
    res = collectives.simulate(p, lambda comm: collectives.allreduce(comm, xs[comm.Get_rank()], op, algorithm))
    ref = reference(op, xs)
    for out in res:
        assert out.dtype == np.dtype(dtype) and out.shape == shape
        np.testing.assert_array_equal(out, ref)


@settings(max_examples=60)
@given(
    p=st.integers(1, 9),
    op=st.sampled_from(["maxloc", "minloc"]),
    value_dtype=st.sampled_from(["int16", "uint8", "float32", "float64"]),
    shape=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=5),
    algorithm=st.sampled_from(ALLREDUCE),
    seed=st.integers(0, 2**32 - 1),
)
def test_maxloc_minloc_allreduce(p, op, value_dtype, shape, algorithm, seed):
    xs = [pair_data(seed, r, shape, value_dtype) for r in range(p)]
    res = collectives.simulate(p, lambda comm: collectives.allreduce(comm, xs[comm.Get_rank()], op, algorithm))
    ref = loc_reference(op, np.stack(xs))
    for out in res:
        assert out.dtype == xs[0].dtype and out.shape == shape
        assert out.tobytes() == ref.tobytes()


def test_maxloc_where_is_the_largest_loss():
    losses = [2.5, 7.0, 7.0, 1.0]  # ranks 1 and 2 tie: the smaller index wins, as in MPI

    def fn(comm):
        r = comm.Get_rank()
        return collectives.allreduce(comm, collectives.pairs(losses[r], r), "maxloc")

    for out in collectives.simulate(4, fn):
        assert out["value"] == 7.0 and out["index"] == 1


@pytest.mark.parametrize(
    "dtype,op,words",
    [
        ("float32", "land", "bool and integer"),
        ("complex64", "bxor", "bool and integer"),
        ("float64", "maxloc", "(value, index) pairs"),
        ("int32", "minloc", "(value, index) pairs"),
    ],
)
def test_ops_refused_on_every_rank(dtype, op, words):
    msg = errors_on_every_rank(3, lambda comm: collectives.allreduce(comm, np.ones(3, dtype), op=op), TypeError)
    assert words in msg


# -- barrier --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 9])
def test_dissemination_barrier_lets_no_rank_out_before_all_arrive(p):
    res = collectives.simulate(p, lambda comm: collectives.barrier(comm, check=False))
    rounds = (p - 1).bit_length()
    assert res.rounds == rounds and all(m.tag == TAG_BARRIER and m.nbytes == 0 for m in res.messages)
    heard = [{r} for r in range(p)]  # whom each rank has heard from, directly or through others
    for step in range(rounds):
        before = [set(h) for h in heard]
        for m in res.messages:
            if m.step == step:
                heard[m.dest] |= before[m.source]
    assert all(h == set(range(p)) for h in heard)
    checked = collectives.simulate(p, collectives.barrier)
    assert checked.rounds == rounds + (0 if p == 1 else (p.bit_length() - 1) + 2 * int(p & (p - 1) != 0))


def test_a_rank_in_another_collective_than_the_barrier_raises_not_hangs():
    def fn(comm):
        if comm.Get_rank() == 1:
            return collectives.allreduce(comm, np.ones(3))
        return collectives.barrier(comm)

    assert "ranks [1]: recursive_doubling.allreduce" in errors_on_every_rank(4, fn, collectives.MismatchError)


# -- alltoall, alltoallv ----------------------------------------------------------------------------------
@settings(max_examples=60)
@given(
    p=st.integers(1, 9),
    rest=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4),
    dtype=st.sampled_from(["int32", "float64", "bool"]),
    algorithm=st.sampled_from(["pairwise", "bruck", "auto"]),
    seed=st.integers(0, 1000),
)
def test_alltoall_is_a_transpose(p, rest, dtype, algorithm, seed):
    xs = [rank_data(seed, r, (p, *rest), dtype) for r in range(p)]
    res = collectives.simulate(p, lambda comm: collectives.alltoall(comm, xs[comm.Get_rank()], algorithm))
    for r, out in enumerate(res):
        np.testing.assert_array_equal(out, np.stack([xs[i][r] for i in range(p)]))


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_alltoall_rounds_pairwise_and_bruck(p):
    for algorithm, rounds in [("pairwise", p - 1), ("bruck", (p - 1).bit_length())]:
        res = collectives.simulate(
            p, lambda comm, a=algorithm: collectives.alltoall(comm, np.zeros((p, 2)), a, check=False)
        )
        assert res.rounds == rounds and {m.tag for m in res.messages} == {TAG_ALLTOALL}


@settings(max_examples=40)
@given(p=st.integers(1, 7), seed=st.integers(0, 1000))
def test_alltoallv_against_numpy(p, seed):
    counts = np.random.default_rng(seed).integers(0, 4, (p, p))  # counts[i, j]: rank i sends to rank j
    xs = [rank_data(seed, i, (int(counts[i].sum()),), "int64") for i in range(p)]
    res = collectives.simulate(
        p, lambda comm: collectives.alltoallv(comm, xs[comm.Get_rank()], counts[comm.Get_rank()])
    )
    for j, (out, received) in enumerate(res):
        parts = [np.split(xs[i], np.cumsum(counts[i])[:-1])[j] for i in range(p)]
        np.testing.assert_array_equal(out, np.concatenate(parts))
        assert received == counts[:, j].tolist()


# -- v-collectives and reduce_scatter with counts ---------------------------------------------------------
@settings(max_examples=40)
@given(p=st.integers(1, 9), root=st.integers(0, 8), seed=st.integers(0, 1000))
def test_allgatherv_gatherv_scatterv(p, root, seed):
    root %= p
    counts = np.random.default_rng(seed).integers(0, 5, p).tolist()
    xs = [rank_data(seed, r, (counts[r],), "float32") for r in range(p)]
    whole = np.concatenate(xs)

    def fn(comm):
        r = comm.Get_rank()
        return (
            collectives.allgatherv(comm, xs[r]),
            collectives.gatherv(comm, xs[r], root=root),
            collectives.scatterv(comm, whole if r == root else None, counts if r == root else None, root=root),
        )

    for r, ((ag, ag_counts), (ga, ga_counts), sc) in enumerate(collectives.simulate(p, fn)):
        np.testing.assert_array_equal(ag, whole)
        assert ag_counts == ga_counts == counts
        if r == root:
            np.testing.assert_array_equal(ga, whole)
        else:
            assert ga is None
        np.testing.assert_array_equal(sc, xs[r])


@settings(max_examples=40)
@given(
    p=st.integers(1, 9),
    algorithm=st.sampled_from(["ring", "recursive_halving"]),
    op=st.sampled_from(["sum", "max", "bor"]),
    seed=st.integers(0, 1000),
)
def test_reduce_scatter_with_given_counts(p, algorithm, op, seed):
    counts = np.random.default_rng(seed).integers(0, 5, p).tolist()
    n = sum(counts)
    xs = [rank_data(seed, r, (n,), "int32") for r in range(p)]
    res = collectives.simulate(
        p, lambda comm: collectives.reduce_scatter(comm, xs[comm.Get_rank()], op, algorithm, counts=counts)
    )
    b = bounds_of(counts)
    total = reference(op, xs)
    for r, out in enumerate(res):
        np.testing.assert_array_equal(out, total[b[r] : b[r + 1]])


# -- scan and exscan -----------------------------------------------------------------------------------------
@settings(max_examples=60)
@given(
    p=st.integers(1, 9),
    case=st.sampled_from(
        [
            ("int32", "sum"),
            ("float64", "sum"),
            ("int16", "max"),
            ("uint8", "band"),
            ("bool", "lxor"),
            ("pairs", "minloc"),
        ]
    ),
    shape=array_shapes(min_dims=0, max_dims=2, min_side=0, max_side=4),
    seed=st.integers(0, 1000),
)
def test_scan_and_exscan_against_numpy(p, case, shape, seed):
    dtype, op = case
    if dtype == "pairs":
        xs = [pair_data(seed, r, shape) for r in range(p)]
    else:
        xs = [rank_data(seed, r, shape, dtype, op) for r in range(p)]
    res = collectives.simulate(
        p,
        lambda comm: (
            collectives.scan(comm, xs[comm.Get_rank()], op),
            collectives.exscan(comm, xs[comm.Get_rank()], op),
        ),
    )
    for r, (inclusive, exclusive) in enumerate(res):
        ref = reference(op, xs[: r + 1])
        if dtype == "float64":
            np.testing.assert_allclose(inclusive, ref, rtol=1e-12, atol=1e-12)
        else:
            assert inclusive.tobytes() == ref.tobytes()
        if r == 0:
            assert exclusive is None
        else:
            ref = reference(op, xs[:r])
            np.testing.assert_allclose(exclusive, ref, rtol=1e-12, atol=1e-12) if dtype == "float64" else None
            assert dtype == "float64" or exclusive.tobytes() == ref.tobytes()


@pytest.mark.parametrize("p", [2, 3, 5, 8])
def test_scan_takes_ceil_log2_p_rounds(p):
    res = collectives.simulate(p, lambda comm: collectives.scan(comm, np.ones(3), check=False))
    assert res.rounds == (p - 1).bit_length()
    assert [r.tolist() for r in res] == [[r + 1.0] * 3 for r in range(p)]


# -- ranks that disagree: the same MismatchError on every rank ------------------------------------------------
def odd_dtype(comm, shape=(3,)):
    return np.ones(shape, np.float32 if comm.Get_rank() == 1 else np.float64)


@pytest.mark.parametrize(
    "name,call",
    [
        ("alltoall", lambda comm: collectives.alltoall(comm, odd_dtype(comm, (comm.Get_size(), 2)))),
        (
            "alltoallv",
            lambda comm: collectives.alltoallv(comm, odd_dtype(comm, (comm.Get_size(),)), [1] * comm.Get_size()),
        ),
        ("allgatherv", lambda comm: collectives.allgatherv(comm, odd_dtype(comm))),
        ("gatherv", lambda comm: collectives.gatherv(comm, odd_dtype(comm))),
        ("gatherv root", lambda comm: collectives.gatherv(comm, np.ones(2), root=comm.Get_rank() % 2)),
        ("scatterv root", lambda comm: collectives.scatterv(comm, np.ones(4), [1, 1, 1, 1], root=comm.Get_rank() % 2)),
        ("scan", lambda comm: collectives.scan(comm, odd_dtype(comm))),
        ("exscan op", lambda comm: collectives.exscan(comm, np.ones(3), "max" if comm.Get_rank() == 1 else "sum")),
        (
            "reduce_scatter counts",
            lambda comm: collectives.reduce_scatter(
                comm, np.ones(4), counts=[1, 1, 1, 1] if comm.Get_rank() != 1 else [2, 0, 1, 1]
            ),
        ),
        (
            "reduce_scatter with and without counts",
            lambda comm: collectives.reduce_scatter(
                comm, np.ones(4), counts=[1, 1, 1, 1] if comm.Get_rank() != 1 else None
            ),
        ),
        (
            "scan against allreduce",
            lambda comm: (collectives.scan if comm.Get_rank() else collectives.allreduce)(comm, np.ones(3)),
        ),
    ],
)
def test_new_collectives_name_the_disagreement_on_every_rank(name, call):
    assert "every rank raises this error" in errors_on_every_rank(4, call, collectives.MismatchError)


def test_bad_counts_raise_on_every_rank():
    def reduce_scatter(comm):
        collectives.reduce_scatter(comm, np.ones(4), counts=[1, 1, 1, 2 if comm.Get_rank() == 2 else 1])

    assert "rank 2: [-1, -1, -1, -1]" in errors_on_every_rank(4, reduce_scatter, collectives.MismatchError)
    errors_on_every_rank(3, lambda comm: collectives.reduce_scatter(comm, np.ones(4), counts=[1, 1]), ValueError)

    def alltoallv(comm):
        collectives.alltoallv(comm, np.ones(3), [1, 1, 1] if comm.Get_rank() != 0 else [1, 1, 2])

    assert "ranks [0]" in errors_on_every_rank(3, alltoallv, ValueError)

    def scatterv(comm):
        collectives.scatterv(
            comm, np.ones(3) if comm.Get_rank() == 0 else None, [1, 1] if comm.Get_rank() == 0 else None
        )

    assert "root (rank 0)" in errors_on_every_rank(3, scatterv, ValueError)
