"""Row-sparse gradient exchange (Embedding(sparse=True) under data parallelism) on the simulated communicator."""

from __future__ import annotations

import numpy as np
import pytest

import minidl.distributed as dist
from minidl import nn, optim
from minidl.distributed.comm import SingleProcess
from minidl.distributed.data_parallel.fusion import plan_buckets
from minidl.distributed.data_parallel.sparse_rows import exchange_rows, nonzero_rows
from minidl.tensor import Tensor

collectives = pytest.importorskip("collectives")

from helpers.distributed_equivalence import assert_replicas_identical, initial_state, train  # noqa: E402

V, H = 40, 3


def _grad(rank: int, rows: list[int]) -> np.ndarray:
    g = np.zeros((V, H))
    g[rows] = np.random.default_rng(rank).standard_normal((len(rows), H))
    return g


def _exchange(grads: list[np.ndarray | None], scale: float = 1.0):
    """Every rank's p.grad after exchange_rows, and whether each rank fell back to the dense path."""

    def rank_fn(comm):
        p = Tensor(np.ones((V, H)), requires_grad=True)
        g = grads[comm.Get_rank()]
        p.grad = None if g is None else g.copy()
        fell_back = []
        exchange_rows(p, comm, scale, lambda: fell_back.append(True))
        return p.grad, bool(fell_back)

    return collectives.simulate(len(grads), rank_fn)


@pytest.mark.parametrize("P", [2, 3, 5])
def test_rows_sum_equals_the_dense_sum_on_every_rank(P):
    grads = [_grad(r, [r, 7, 2 * r + 10]) for r in range(P)]  # row 7 on every rank, the rest on one or two
    out = _exchange(grads, scale=1.0 / P)
    want = sum(grads) / P
    for got, fell_back in out:
        assert not fell_back
        np.testing.assert_allclose(got, want, rtol=1e-15, atol=0)
    assert len({got.tobytes() for got, _ in out}) == 1  # bitwise the same everywhere


def test_two_ranks_bitwise_equal_to_the_ring_allreduce():
    grads = [_grad(r, [1, 5, 6 + r]) for r in range(2)]
    dense = collectives.simulate(
        2, lambda comm: collectives.allreduce(comm, grads[comm.Get_rank()].ravel(), algorithm="ring")
    )
    for got, _ in _exchange(grads):
        assert got.ravel().tobytes() == dense[0].tobytes()


def test_a_rank_without_gradient_and_ranks_without_rows():
    grads = [None, _grad(1, [3]), np.zeros((V, H))]
    for got, _ in _exchange(grads):
        np.testing.assert_array_equal(got, grads[1])
    assert all(got is None for got, _ in _exchange([None, None]))  # nobody has one: it stays None, as dense


def test_a_gradient_of_another_dtype_or_layout_is_summed_like_the_dense_path():
    """Regressions: a float32 gradient of a float64 table was replaced by zeros; a rank without a gradient of
    a Fortran-ordered 3-D parameter summed into a copy and kept zeros."""

    def rank_fn(comm, data, grad):
        p = Tensor(data.copy(), requires_grad=True)
        p.grad = grad(comm.Get_rank())
        exchange_rows(p, comm, 0.5, lambda: None)
        return p.grad

    g32 = lambda r: np.eye(V, H, -r - 1, dtype=np.float32)  # noqa: E731  (row r + 1 of ones)
    out = collectives.simulate(2, rank_fn, np.zeros((V, H)), g32)
    for got in out:
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got, (g32(0) + g32(1)) / 2)
    cube = np.asfortranarray(np.zeros((V, 2, 2)))
    out = collectives.simulate(
        2, rank_fn, cube, lambda r: None if r == 0 else np.ones((V, 2, 2)) * (np.arange(V) < 3)[:, None, None]
    )
    for got in out:
        np.testing.assert_array_equal(got, np.ones((V, 2, 2)) * (np.arange(V) < 3)[:, None, None] / 2)


def test_many_rows_fall_back_to_the_dense_exchange_on_every_rank():
    grads = [_grad(0, list(range(15))), _grad(1, list(range(10, 25)))]  # 30 rows > V/2 = 20
    assert all(fell_back for _, fell_back in _exchange(grads))


def test_nan_rows_travel():
    g = _grad(0, [2])
    g[4, 1] = np.nan
    assert list(nonzero_rows(g)) == [2, 4]
    got, _ = _exchange([g, _grad(1, [2])])[0]
    assert np.isnan(got[4, 1]) and np.isnan(got[4]).sum() == 1


def test_plan_gives_the_marked_parameter_a_rows_bucket_of_its_own():
    emb, lin = nn.Embedding(V, H, sparse=True), nn.Linear(H, 2)
    params = [emb.weight, lin.weight, lin.bias]
    assert [b.rows for b in plan_buckets(params, 1 << 20, rows=True)] == [True, False]
    assert [b.rows for b in plan_buckets(params, 1 << 20)] == [False]  # rows=False: fused like any other
    for kw, rows in (
        ({}, [False, True]),  # reversed: the order backward finishes them
        ({"compression": "fp16"}, [False]),
        ({"sparse_as_dense": True}, [False]),
    ):
        opt = dist.DistributedOptimizer(optim.SGD(params, lr=0.1), comm=SingleProcess(), **kw)
        assert [b.rows for b in opt.buckets] == rows, kw


@pytest.mark.parametrize("P", [2, 4])
def test_sparse_embedding_lm_bitwise_as_dense_at_two_ranks_and_close_beyond(P, monkeypatch):
    from minidl.distributed.data_parallel import fusion

    paths = []

    def counted(p, comm, scale, dense):
        def dense_counted():
            paths.append("dense")
            dense()

        paths.append("call")
        exchange_rows(p, comm, scale, dense_counted)

    monkeypatch.setattr(fusion, "exchange_rows", counted)
    init = initial_state("lm_sparse")
    runs = {
        flag: collectives.simulate(
            P, lambda comm, f=flag: train("lm_sparse", init, 3, comm, "ring", world=P, sparse_as_dense=f)
        )
        for flag in (False, True)
    }
    assert_replicas_identical(runs[False])
    assert paths.count("call") == 3 * P and "dense" not in paths  # every step by rows (13 of 64 rows used)
    for k in init:
        a, b = runs[False][0][k], runs[True][0][k]
        if P == 2:
            assert a.tobytes() == b.tobytes(), k
        else:
            np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-14, err_msg=k)


def test_ranks_that_mark_the_embedding_differently_fail_before_the_first_step():
    def rank_fn(comm):
        emb = nn.Embedding(V, H, sparse=comm.Get_rank() == 0)
        try:
            dist.DistributedOptimizer(optim.SGD(emb.parameters(), lr=0.1), comm=comm)
        except ValueError as e:
            return str(e)
        return None

    errors = collectives.simulate(2, rank_fn, timeout=20)
    assert all(e is not None and "sparse_grad" in e for e in errors), errors
