"""collectives on the simulated communicator: results against NumPy, bitwise agreement across ranks,
inputs untouched, and the message record against the cost model."""

import numpy as np
import pytest
from helpers.ranks import errors_on_every_rank
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import collectives
from collectives import cost
from collectives.agreement import INLINE, STATUS, handshake, header
from collectives.common import TAG_ALLGATHER, TAG_CHECK, TAG_EXCHANGE, TAG_HEADERS, TAG_REDUCE_SCATTER, block_bounds
from collectives.inprocess import traffic
from collectives.testing import SUPPORTED_KINDS, rank_data

DTYPES = [
    "int8",
    "int16",
    "int32",
    "int64",
    "uint8",
    "uint16",
    "uint64",
    "float16",
    "float32",
    "float64",
    "complex64",
    "complex128",
    "bool",
]


def assert_reduction(out, xs, op):
    """out equals NumPy's reduction of xs: exactly for integers, bool and max/min; to rounding for float sum/prod."""
    stacked = np.stack(xs)
    ref = collectives.OPS[op].reduce(stacked, axis=0, dtype=stacked.dtype)
    assert out.shape == xs[0].shape and out.dtype == xs[0].dtype
    if stacked.dtype.kind in "biu" or op in ("max", "min"):
        np.testing.assert_array_equal(out, ref)
        return
    # Any summation order is within (p - 1) eps sum|x_i| of the exact sum (and products near 1 likewise).
    eps = np.finfo(stacked.dtype).eps
    p = len(xs)
    scale = np.abs(stacked.astype(np.complex128)).sum(axis=0) if op == "sum" else np.abs(ref.astype(np.complex128))
    tol = 2 * p * eps * scale + np.finfo(stacked.dtype).tiny
    err = np.abs(out.astype(np.complex128) - ref.astype(np.complex128))
    assert np.all(err <= tol), (err.max(), tol.min())


def run_allreduce(p, xs, op, algorithm, check=True):
    snapshot = [x.copy() for x in xs]
    res = collectives.simulate(
        p, lambda comm: collectives.allreduce(comm, xs[comm.Get_rank()], op=op, algorithm=algorithm, check=check)
    )
    for x, before in zip(xs, snapshot):
        np.testing.assert_array_equal(x, before)  # inputs untouched
    for x, out in zip(xs, res):
        assert not np.shares_memory(x, out)  # a new array
        assert out.tobytes() == res[0].tobytes()  # bitwise identical on every rank
    return res


@st.composite
def cases(draw):
    dtype = draw(st.sampled_from(DTYPES))
    op = draw(st.sampled_from([o for o, kinds in SUPPORTED_KINDS.items() if np.dtype(dtype).kind in kinds]))
    shape = draw(array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=6))
    return draw(st.integers(1, 16)), dtype, op, shape, draw(st.integers(0, 2**32 - 1))


@settings(max_examples=200)
@given(case=cases(), algorithm=st.sampled_from(collectives.ALGORITHMS + ("auto",)))
def test_allreduce_matches_numpy(case, algorithm):
    p, dtype, op, shape, seed = case
    xs = [rank_data(seed, r, shape, dtype, op) for r in range(p)]
    res = run_allreduce(p, xs, op, algorithm)
    assert_reduction(res[0], xs, op)


@settings(max_examples=100)
@given(p=st.integers(1, 16), n=st.integers(0, 40), algorithm=st.sampled_from(collectives.ALGORITHMS))
def test_message_record_matches_cost_model(p, n, algorithm):
    xs = [np.arange(n, dtype=np.float32) + r for r in range(p)]
    res = run_allreduce(p, xs, "sum", algorithm, check=False)
    count, nbytes = traffic(res.messages, p)
    assert count == cost.messages_per_rank(algorithm, p)
    assert sum(nbytes) == cost.total_bytes(algorithm, p, 4 * n)
    assert res.rounds == cost.terms(algorithm, p, 4 * n).rounds  # the alpha count: steps on the critical path


@pytest.mark.parametrize("p", [2, 3, 4, 7])
def test_ring_moves_2_p_minus_1_over_p_of_the_data_per_rank(p):
    n = 1000
    res = run_allreduce(p, [np.ones(n) for _ in range(p)], "sum", "ring", check=False)
    count, nbytes = traffic(res.messages, p)
    b = block_bounds(n, p)
    c = [b[i + 1] - b[i] for i in range(p)]
    for r in range(p):
        assert count[r] == 2 * (p - 1)
        # every block but its own in the reduce-scatter, every block but r+1's in the allgather
        assert nbytes[r] == 8 * (2 * n - c[r] - c[(r + 1) % p])
        assert abs(nbytes[r] - 8 * 2 * (p - 1) / p * n) <= 8 * 2


@pytest.mark.parametrize("p", [1, 2, 3, 5, 8, 13])
def test_agreement_check_is_a_recursive_doubling_handshake_of_headers(p):
    res = collectives.simulate(p, lambda comm: collectives.allreduce(comm, np.ones(3), algorithm="ring"))
    checks = [m for m in res.messages if m.tag == TAG_CHECK]
    k, d = p.bit_length() - 1, int(p & (p - 1) != 0)
    rounds = max((m.arrival for m in checks), default=0)
    assert rounds == k + 2 * d
    assert all(m.nbytes == 88 + 8 + STATUS for m in checks)  # header (a 1-d shape) and status word: no data
    assert not [m for m in res.messages if m.tag == TAG_HEADERS]  # the table only after a failed handshake


def test_tree_broadcast_schedule_is_binomial():
    res = collectives.simulate(8, lambda comm: collectives.tree.broadcast_into(comm, np.ones(2), root=0))
    root_sends = [(m.step, m.dest) for m in res.messages if m.source == 0]
    assert root_sends == [(0, 4), (1, 2), (2, 1)]
    assert res.rounds == 3


@settings(max_examples=60)
@given(
    p=st.integers(1, 9),
    shape=array_shapes(min_dims=1, max_dims=2, min_side=0, max_side=5),
    root=st.integers(0, 8),
    seed=st.integers(0, 1000),
)
def test_building_blocks(p, shape, root, seed):
    root %= p
    xs = [rank_data(seed, r, shape, "int32", "sum") for r in range(p)]

    def fn(comm):
        r = comm.Get_rank()
        x = xs[r]
        return (
            collectives.broadcast(comm, x if r == root else None, root=root),
            collectives.broadcast(comm, x, root=root),
            collectives.reduce(comm, x, "max", root=root),
            collectives.reduce_scatter(comm, x, "sum", algorithm="ring"),
            collectives.reduce_scatter(comm, x, "sum", algorithm="recursive_halving"),
            collectives.allgather(comm, x, algorithm="ring"),
            collectives.allgather(comm, x, algorithm="recursive_doubling"),
            collectives.gather(comm, x, root=root),
            collectives.scatter(comm, np.stack(xs) if r == root else None, root=root),
        )

    res = collectives.simulate(p, fn)
    total = np.add.reduce(np.stack(xs), axis=0, dtype=np.int32).reshape(-1)
    b = block_bounds(total.size, p)
    for r, (bc, bc2, red, rs_ring, rs_half, ag_ring, ag_rd, gat, sca) in enumerate(res):
        np.testing.assert_array_equal(bc, xs[root])
        np.testing.assert_array_equal(bc2, xs[root])
        if r == root:
            np.testing.assert_array_equal(red, np.maximum.reduce(np.stack(xs), axis=0))
            np.testing.assert_array_equal(gat, np.stack(xs))
        else:
            assert red is None and gat is None
        np.testing.assert_array_equal(rs_ring, total[b[r] : b[r + 1]])
        np.testing.assert_array_equal(rs_half, total[b[r] : b[r + 1]])
        np.testing.assert_array_equal(ag_ring, np.stack(xs))
        np.testing.assert_array_equal(ag_rd, np.stack(xs))
        np.testing.assert_array_equal(sca, xs[r])


def test_odd_inputs_non_contiguous_byteswapped_0d_and_lists():
    base = np.arange(24, dtype=np.float64).reshape(4, 6)
    cases = [base[:, ::2], base.astype(">f8"), np.float32(3.0), [[1, 2], [3, 4]]]
    for x in cases:
        res = collectives.simulate(3, lambda comm, x=x: collectives.allreduce(comm, x, algorithm="ring"))
        np.testing.assert_array_equal(res[0], 3 * np.asarray(x))
        assert res[0].shape == np.shape(x)


@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS)
def test_signed_zeros_and_nans_give_the_same_bits_everywhere(algorithm):
    nan_a = np.array([np.nan], np.float64)
    nan_b = (nan_a.view(np.uint64) | np.uint64(1)).view(np.float64)  # a NaN with another payload
    xs = [np.concatenate([[0.0 if r % 2 else -0.0], nan_a if r % 2 else nan_b]) for r in range(6)]
    for op in ("max", "min", "sum"):
        res = run_allreduce(6, xs, op, algorithm)
        assert np.isnan(res[0][1])


@pytest.mark.parametrize("p", [2, 5, 8, 11])
def test_complex_products_give_the_same_bits_everywhere(p):
    # complex multiplies may use fused multiply-adds; each rank must run the same NumPy loop on the same operands
    for seed, shape in [(0, ()), (1, (1,)), (3, (33,))]:
        xs = [rank_data(seed, r, shape, "complex64", "prod") for r in range(p)]
        for algorithm in collectives.ALGORITHMS:
            run_allreduce(p, xs, "prod", algorithm)


def test_choose_algorithm_is_the_cheapest_prediction():
    params = cost.CostParams(alpha=1e-5, beta=1e-9, gamma=1e-9)
    for p in (2, 3, 4, 5, 8, 16):
        for nbytes in (8, 1 << 10, 1 << 16, 1 << 20, 1 << 26):
            name, times = collectives.choose_algorithm(p, nbytes, params)
            assert set(times) == set(collectives.ALGORITHMS)
            assert times[name] == pytest.approx(min(times.values()), rel=cost.TIE)
    assert collectives.choose_algorithm(4, 8, params)[0] == "recursive_doubling"  # latency-bound
    assert collectives.choose_algorithm(8, 1 << 26, params)[0] == "rabenseifner"  # bandwidth-bound
    assert collectives.choose_algorithm(3, 1 << 26, params)[0] == "ring"  # the fold costs 2 n beta


@pytest.mark.parametrize("nbytes", [1 << 16, 1 << 20, 1 << 26])
def test_ties_go_to_the_ring_before_rabenseifner(nbytes):
    # p = 2: the same messages and the same local work, so the same prediction at every size
    params = cost.CostParams(alpha=1e-5, beta=1e-9, gamma=1e-9)
    name, times = collectives.choose_algorithm(2, nbytes, params)
    assert times["ring"] == times["rabenseifner"] and name == "ring"
    # p = 4 without latency: equal bytes sent and reduced; with it, Rabenseifner's 4 rounds beat the ring's 6
    assert collectives.choose_algorithm(4, nbytes, cost.CostParams(0.0, 1e-9, 1e-9))[0] == "ring"
    assert collectives.choose_algorithm(4, nbytes, cost.CostParams(1e-9, 1e-9, 1e-9))[0] == "rabenseifner"


class RecordingComm:
    """A communicator that notes every Sendrecv's receive buffer and tag, then passes the call on."""

    def __init__(self, comm):
        self.comm, self.received = comm, []

    def __getattr__(self, name):
        return getattr(self.comm, name)

    def Sendrecv(self, sendbuf, dest, sendtag=0, recvbuf=None, source=-2, recvtag=-1):
        self.received.append((recvbuf, recvtag))
        return self.comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag)


@pytest.mark.parametrize("algorithm", ["ring", "rabenseifner"])
@pytest.mark.parametrize("p", [2, 4, 8])
def test_reduce_scatter_receives_straight_into_the_result(algorithm, p):
    # no temporaries: every partial sum arrives in the array that is returned (powers of two, n >= p)
    def run(comm):
        rec = RecordingComm(comm)
        out = getattr(collectives, algorithm).allreduce(rec, np.arange(64, dtype=np.float32), np.add)
        return out, [buf for buf, tag in rec.received if tag == TAG_REDUCE_SCATTER]

    for out, bufs in collectives.simulate(p, run):
        np.testing.assert_array_equal(out, p * np.arange(64))
        assert len(bufs) == (p - 1 if algorithm == "ring" else p.bit_length() - 1)
        assert all(np.shares_memory(buf, out) for buf in bufs)


def test_auto_runs_the_algorithm_the_current_parameters_choose():
    before = cost.get_params()
    used = {}
    try:
        regimes = [("latency", cost.CostParams(1.0, 1e-12, 1e-12)), ("bandwidth", cost.CostParams(1e-9, 1e-9, 1e-9))]
        for name, params in regimes:
            cost.set_params(params)
            res = collectives.simulate(4, lambda comm: collectives.allreduce(comm, np.ones(1000), check=False))
            used[name] = {m.tag for m in res.messages}
    finally:
        cost.set_params(before)
    assert used["latency"] == {TAG_EXCHANGE}  # recursive doubling: the fewest rounds
    assert used["bandwidth"] == {TAG_REDUCE_SCATTER, TAG_ALLGATHER}  # Rabenseifner: the fewest bytes and rounds


def test_cost_model_formulas():
    c = cost.CostParams(alpha=1.0, beta=0.0, gamma=0.0)
    assert [cost.predict(a, 8, 100, c) for a in collectives.ALGORITHMS] == [3, 6, 14, 6, 14]
    c = cost.CostParams(alpha=0.0, beta=1.0, gamma=0.0)
    assert cost.predict("ring", 4, 100, c) == pytest.approx(150)
    assert cost.predict("rabenseifner", 5, 100, c) == pytest.approx(350)
    assert cost.messages_per_rank("tree", 6) == [3, 1, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="unknown algorithm"):
        cost.terms("butterfly", 4, 1)


@pytest.mark.parametrize("cold", [False, True])
def test_calibrate_gives_every_rank_the_same_parameters(cold, monkeypatch):
    before, passes = cost.get_params(), []
    cooled = cost._cooled
    monkeypatch.setattr(cost, "COLD_BYTES", 1 << 16)  # small: this test checks the path, not the machine

    def counted(comm):
        work = cooled(comm)

        def before_each():
            passes.append(comm.Get_rank())
            work()

        return before_each

    monkeypatch.setattr(cost, "_cooled", counted)
    try:
        res = collectives.simulate(3, lambda comm: cost.calibrate(comm, large=1 << 12, repeats=3, cold=cold))
    finally:
        cost.set_params(before)
    assert all(r == res[0] for r in res)
    assert res[0].alpha > 0 and res[0].beta >= 0 and res[0].gamma > 0
    assert len(passes) == (3 * (30 + 3) if cold else 0)  # cold: before every timed call on every rank


# -- errors ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("algorithm", collectives.ALGORITHMS + ("auto",))
def test_mismatched_sizes_dtypes_shapes_raise_on_every_rank(algorithm):
    def sizes(comm):
        collectives.allreduce(comm, np.ones(4 + (comm.Get_rank() == 2)), algorithm=algorithm)

    msg = errors_on_every_rank(5, sizes, collectives.MismatchError)
    assert "ranks [2]" in msg and "(5,)" in msg and "(4,)" in msg

    def dtypes(comm):
        collectives.allreduce(comm, np.ones(4, np.float32 if comm.Get_rank() else np.float64), algorithm=algorithm)

    msg = errors_on_every_rank(3, dtypes, collectives.MismatchError)
    assert "float32" in msg and "float64" in msg

    def shapes(comm):
        collectives.allreduce(comm, np.ones((2, 3) if comm.Get_rank() else (3, 2)), algorithm=algorithm)

    assert "(3, 2)" in errors_on_every_rank(4, shapes, collectives.MismatchError)


@settings(max_examples=40)
@given(
    p=st.integers(2, 9),
    bad=st.integers(0, 8),
    what=st.sampled_from(["size", "dtype", "shape", "op"]),
    algorithm=st.sampled_from(collectives.ALGORITHMS),
)
def test_any_rank_that_disagrees_is_named_on_every_rank(p, bad, what, algorithm):
    bad %= p

    def fn(comm):
        odd = comm.Get_rank() == bad
        shape = (5 if odd and what == "size" else 4,) if what != "shape" else ((2, 2) if odd else (4,))
        x = np.ones(shape, np.int32 if odd and what == "dtype" else np.float32)
        collectives.allreduce(comm, x, op="max" if odd and what == "op" else "sum", algorithm=algorithm)

    msg = errors_on_every_rank(p, fn, collectives.MismatchError)
    assert f"ranks [{bad}]:" in msg


@pytest.mark.parametrize("p", [2, 3, 4, 5, 8])
@pytest.mark.parametrize("sizes", [(100, 100), (5000, 5000), (100, 5000), (5000, 100), (3000, 5000)])
def test_recursive_doubling_carries_the_check_for_short_and_long_vectors(p, sizes):
    # data up to INLINE (16 KiB) rides in the handshake; longer data (5000 doubles) follows a data-less handshake
    mine, odd = sizes

    def fn(comm):
        n = odd if comm.Get_rank() == p - 1 else mine
        return collectives.allreduce(comm, np.full(n, comm.Get_rank(), np.float64), algorithm="recursive_doubling")

    if mine == odd:
        res = collectives.simulate(p, fn)
        assert all(np.array_equal(r, np.full(mine, p * (p - 1) / 2)) for r in res)
    else:
        assert f"ranks [{p - 1}]" in errors_on_every_rank(p, fn, collectives.MismatchError)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_checked_short_recursive_doubling_is_one_pass(p):
    n = 256  # float32: 1 KiB, within INLINE
    rd = "recursive_doubling"
    res = collectives.simulate(p, lambda comm: collectives.allreduce(comm, np.ones(n, np.float32), algorithm=rd))
    assert all(np.array_equal(r, np.full(n, p, np.float32)) for r in res)
    assert {m.tag for m in res.messages} == {TAG_CHECK}  # the handshake is the allreduce
    count, nbytes = traffic(res.messages, p)
    assert count == cost.messages_per_rank("recursive_doubling", p)
    prefix = len(header(np.ones(n, np.float32), "sum", "recursive_doubling.allreduce")) + STATUS
    assert sum(nbytes) == cost.total_bytes("recursive_doubling", p, prefix + 4 * n)
    assert res.rounds == cost.terms("recursive_doubling", p, 4 * n).rounds

    long = INLINE // 8 + 1  # float64: past INLINE, a handshake without data, then the plain exchange
    res = collectives.simulate(p, lambda comm: collectives.allreduce(comm, np.ones(long), algorithm=rd))
    assert all(np.array_equal(r, np.full(long, float(p))) for r in res)
    assert {m.nbytes for m in res.messages if m.tag == TAG_CHECK} == {88 + 8 + STATUS}


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("what", ["dtype", "shape", "op", "bad op"])
def test_short_recursive_doubling_detects_mismatches_of_equal_byte_size(p, what):
    # float32 and int32, (2, 8) and (16,), "sum" and "max": the same 64 bytes of data, only the headers differ
    def fn(comm):
        odd = comm.Get_rank() == p - 1
        x = np.ones((2, 8) if odd and what == "shape" else 16, np.int32 if odd and what == "dtype" else np.float32)
        op = {"op": "max", "bad op": "mean"}.get(what, "sum") if odd else "sum"
        collectives.allreduce(comm, x, op=op)

    assert f"ranks [{p - 1}]:" in errors_on_every_rank(p, fn, collectives.MismatchError)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
@pytest.mark.parametrize("other", ["long auto", "ring", "broadcast", "reduce_scatter"])
def test_ranks_in_different_collectives_or_algorithms_raise_not_hang(p, other):
    # "auto" sends rank 0's 1 KiB to recursive doubling (data in the handshake) and 4 MiB elsewhere to
    # Rabenseifner or the ring (handshake without data): they meet in the handshake, whoever calls what
    def fn(comm):
        if comm.Get_rank() == 0:
            return collectives.allreduce(comm, np.ones(256, np.float32))
        if other == "long auto":
            return collectives.allreduce(comm, np.ones(1 << 20, np.float32))
        if other == "ring":
            return collectives.allreduce(comm, np.ones(256, np.float32), algorithm="ring")
        if other == "broadcast":
            return collectives.broadcast(comm, None)
        return collectives.reduce_scatter(comm, np.ones(256, np.float32))

    msg = errors_on_every_rank(p, fn, collectives.MismatchError)
    assert "ranks [0]: recursive_doubling.allreduce with shape (256,)" in msg


def test_handshake_refuses_data_past_inline():
    with pytest.raises(ValueError, match="INLINE"):
        collectives.simulate(1, lambda comm: handshake(comm, bytes(128), np.zeros(INLINE + 1, np.uint8)))


def test_mismatched_ops_algorithms_and_roots_raise_on_every_rank():
    ops = ["sum", "max", "sum"]
    msg = errors_on_every_rank(
        3, lambda comm: collectives.allreduce(comm, np.ones(2), op=ops[comm.Get_rank()]), collectives.MismatchError
    )
    assert "'max'" in msg
    algs = ["ring", "tree", "ring", "ring"]
    errors_on_every_rank(
        4,
        lambda comm: collectives.allreduce(comm, np.ones(2), algorithm=algs[comm.Get_rank()]),
        collectives.MismatchError,
    )
    errors_on_every_rank(
        3, lambda comm: collectives.broadcast(comm, np.ones(2), root=comm.Get_rank() % 2), collectives.MismatchError
    )
    errors_on_every_rank(
        3, lambda comm: collectives.broadcast(comm, np.ones(2 + comm.Get_rank())), collectives.MismatchError
    )
    errors_on_every_rank(3, lambda comm: collectives.broadcast(comm, None), collectives.MismatchError)
    errors_on_every_rank(
        3,
        lambda comm: collectives.scatter(comm, None, root=9 if comm.Get_rank() == 1 else 0),
        collectives.MismatchError,
    )


@pytest.mark.parametrize(
    "dtype,op,exc,words",
    [
        ("bool", "sum", TypeError, "bool"),
        ("bool", "prod", TypeError, "bool"),
        ("complex64", "max", TypeError, "complex"),
        ("complex128", "min", TypeError, "no order"),
        ("object", "sum", TypeError, "dtype object (Python objects, or a minidl Tensor) cannot be sent"),
        ("float32", "mean", ValueError, "unknown op"),
    ],
)
def test_unsupported_op_dtype_pairs_raise_on_every_rank(dtype, op, exc, words):
    msg = errors_on_every_rank(3, lambda comm: collectives.allreduce(comm, np.ones(3, dtype), op=op), exc)
    assert words in msg


def test_bad_arguments():
    with pytest.raises(ValueError, match="unknown allreduce algorithm"):
        collectives.simulate(1, lambda comm: collectives.allreduce(comm, np.ones(2), algorithm="butterfly"))
    with pytest.raises(ValueError, match=r"shape \(3, \.\.\.\)"):
        collectives.simulate(3, lambda comm: collectives.scatter(comm, np.ones((2, 2))))
    with pytest.raises(ValueError, match="unknown reduce_scatter"):
        collectives.simulate(1, lambda comm: collectives.reduce_scatter(comm, np.ones(2), algorithm="x"))
    with pytest.raises(ValueError, match="out of range"):
        collectives.simulate(2, lambda comm: collectives.reduce(comm, np.ones(2), root=5))
