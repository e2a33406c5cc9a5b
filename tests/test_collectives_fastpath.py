"""fastpath.py: the short checked allreduce by a cached plan sends exactly the general path's messages
and returns the same bits; plans follow the cost parameters and their communicator."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import array_shapes

import collectives
from collectives import cost, fastpath
from collectives.dispatch import ALLREDUCE
from collectives.testing import SUPPORTED_KINDS, rank_data


def record(p, fn):
    res = collectives.simulate(p, fn)
    return list(res), sorted((m.step, m.source, m.dest, m.tag, m.nbytes, m.arrival) for m in res.messages)


@settings(max_examples=60)
@given(
    p=st.integers(2, 8),
    dtype=st.sampled_from(["int8", "uint64", "float16", "float32", "complex128", "bool"]),
    shape=array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=5),
    opname=st.sampled_from(["sum", "max", "lxor", "bor"]),
    seed=st.integers(0, 1000),
)
def test_fast_path_sends_the_general_paths_messages_and_returns_its_bits(p, dtype, shape, opname, seed):
    kind = np.dtype(dtype).kind
    op = (
        opname
        if opname in ("lxor", "bor") and kind in "biu"
        else next(o for o in SUPPORTED_KINDS if kind in SUPPORTED_KINDS[o])
    )
    xs = [rank_data(seed, r, shape, dtype, op) for r in range(p)]
    fast, fast_messages = record(p, lambda comm: collectives.allreduce(comm, xs[comm.Get_rank()], op))
    general, general_messages = record(
        p, lambda comm: ALLREDUCE["recursive_doubling"](comm, xs[comm.Get_rank()], op, True)
    )
    assert fast_messages == general_messages
    for a, b, x in zip(fast, general, xs):
        assert a.tobytes() == b.tobytes() and a.shape == b.shape == x.shape and a.dtype == x.dtype
        assert not np.shares_memory(a, x)


def test_the_plan_is_used_and_follows_the_cost_parameters():
    fastpath.clear()
    x = np.ones(64, np.float32)
    collectives.simulate(4, lambda comm: collectives.allreduce(comm, x))
    plans = [plan for plan in fastpath._plans.values() if plan is not None]
    assert len(plans) == 4 and all(plan.send.size == 64 for plan in plans)
    before = cost.get_params()
    try:  # bandwidth-bound parameters: "auto" now picks another algorithm, and the plans step aside
        cost.set_params(cost.CostParams(1e-12, 1e-3, 1e-3))
        res = collectives.simulate(4, lambda comm: collectives.allreduce(comm, x))
        assert {m.tag for m in res.messages} != {1}  # not the handshake alone
        assert all(np.array_equal(r, np.full(64, 4.0)) for r in res)
    finally:
        cost.set_params(before)


@pytest.mark.parametrize("p", [2, 3, 4, 6])
def test_fast_path_mismatches_raise_on_every_rank(p):
    def fn(comm):
        odd = comm.Get_rank() == p - 1
        for _ in range(2):  # the second call runs on the plans made by the first
            try:
                collectives.allreduce(comm, np.ones(8, np.int32 if odd else np.float32))
            except collectives.MismatchError as e:
                out = str(e)
        return out

    res = collectives.simulate(p, fn)
    assert len(set(res)) == 1 and f"ranks [{p - 1}]" in res[0]


def test_plans_do_not_keep_communicators_alive():
    import gc
    import weakref

    fastpath.clear()
    refs = collectives.simulate(2, lambda comm: (collectives.allreduce(comm, np.ones(4)), weakref.ref(comm))[1])
    assert len(fastpath._plans) == 2
    gc.collect()
    assert all(ref() is None for ref in refs)


@pytest.mark.parametrize("p", [2, 4, 5])
@pytest.mark.parametrize("layout", ["strided", "fortran", "0-d"])
def test_fast_path_takes_any_layout_and_leaves_x_alone(p, layout):
    # the plan copies x into its send buffer by a NumPy assignment, so strided and Fortran-order arrays take
    # the fast path too; the result is a new C-contiguous array with the general path's bits
    def data(rank):
        base = rank_data(7, rank, (6, 8), "float64", "sum")
        return {"strided": base[::2, 1::3], "fortran": np.asfortranarray(base), "0-d": base[1, 2].reshape(())}[layout]

    def fast(comm):
        x = data(comm.Get_rank())
        before = x.copy()
        outs = [collectives.allreduce(comm, x) for _ in range(3)]  # the later calls run on the plan
        assert np.array_equal(x, before)
        return outs

    res, _ = record(p, fast)
    general, _ = record(p, lambda comm: ALLREDUCE["recursive_doubling"](comm, data(comm.Get_rank()), "sum", True))
    for outs, ref in zip(res, general):
        for out in outs:
            assert out.tobytes() == ref.tobytes() and out.shape == ref.shape and out.flags.c_contiguous
            assert isinstance(out, np.ndarray) and not np.shares_memory(out, data(0))
        assert not np.shares_memory(outs[0], outs[1])


@pytest.mark.parametrize("p", [2, 4, 8])
def test_after_a_mismatch_the_plan_agrees_again(p):
    # a disagreement marks the plan's send buffer DIFFERS for the steps after it; the next call must send
    # AGREED again (and so get the right answer, not a MismatchError)
    def fn(comm):
        rank, results = comm.Get_rank(), []
        for bad in (False, True, False, True, True, False):
            x = np.ones(9 if bad and rank == 0 else 8, np.float32)
            try:
                results.append(collectives.allreduce(comm, x).tolist())
            except collectives.MismatchError:
                results.append("mismatch")
        return results

    res = collectives.simulate(p, fn)
    ok = np.full(8, float(p)).tolist()
    assert all(r == [ok, "mismatch", ok, "mismatch", "mismatch", ok] for r in res)


def test_the_last_plan_follows_the_call():
    # calls that alternate between communicators, shapes, dtypes and ops each get their own plan
    fastpath.clear()

    def fn(comm):
        other = comm.Dup()
        outs = []
        for i in range(4):
            c = comm if i % 2 else other
            outs.append(collectives.allreduce(c, np.full(4 + i % 2, comm.Get_rank() + 1, np.int64), "max"))
            outs.append(collectives.allreduce(c, np.full(3, comm.Get_rank() + 1, np.int32)))
        return [o.tolist() for o in outs]

    res = collectives.simulate(4, fn)
    assert all(r == [[4] * (4 + i % 2) if j == 0 else [10] * 3 for i in range(4) for j in range(2)] for r in res)
