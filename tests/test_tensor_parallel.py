"""Megatron-style tensor parallelism on the simulated communicator: sharding, f/g operators,
column/row-parallel Linear, the parallel MLP, vocabulary-parallel cross entropy and the
tensor-parallel LM all compute (and train) what the dense model does (float64, 1e-8 relative).

The scenario functions take a communicator and are reused by tests/mpi/test_tensor_parallel_mpi.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_model_parallel import lm_batches, make_lm, train_lm_dense

import collectives
import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.counting import CountingComm
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import tensor_parallel as tp
from minidl.gradcheck import numerical_grad
from minidl.models.lm import Recurrent

STEPS = 3
RTOL = 1e-8


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def assert_close(got, want, rtol: float = RTOL, what: str = "") -> None:
    want = np.asarray(want)
    np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol * max(np.abs(want).max(), 1e-300), err_msg=what)


# ----------------------------------------------------------------------------- scenarios (shared with tests/mpi)
def make_mlp_block() -> tuple[nn.Linear, nn.Linear, nn.Linear]:
    """fc1 (6 -> 11), fc2 (11 -> 5): the MLP block; head (5 -> 7): a column-parallel classifier."""
    minidl.manual_seed(9)
    return nn.Linear(6, 11), nn.Linear(11, 5), nn.Linear(5, 7)


def mlp_batches(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(4)
    return [(rng.standard_normal((8, 6)), rng.integers(0, 7, 8)) for _ in range(steps)]


def dense_mlp_loss(fc1, fc2, head, x, y):
    return F.cross_entropy(head(fc2(fc1(x).relu()).tanh()), y)


def train_mlp_dense(steps: int = STEPS) -> list[np.ndarray]:
    fc1, fc2, head = make_mlp_block()
    params = [*fc1.parameters(), *fc2.parameters(), *head.parameters()]
    opt = optim.SGD(params, lr=0.4, momentum=0.5)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        dense_mlp_loss(fc1, fc2, head, minidl.tensor(x), y).backward()
        opt.step()
    return [p.data for p in params]


def train_mlp(comm, steps: int = STEPS, gather_head: bool = True) -> tuple[list[np.ndarray], int]:
    """The same model, fc1/fc2 as a ParallelMLP and the head column-parallel (gathered logits, or the
    vocabulary-parallel loss); returns the gathered dense parameters and the bytes this rank sent."""
    counting = CountingComm(comm)
    fc1, fc2, head = make_mlp_block()
    mlp = tp.ParallelMLP.from_dense(fc1, nn.ReLU(), fc2, comm=counting)
    col = tp.ColumnParallelLinear.from_dense(head, gather_output=gather_head, comm=counting)
    del fc1, fc2, head
    opt = optim.SGD([*mlp.parameters(), *col.parameters()], lr=0.4, momentum=0.5)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        logits = col(mlp(minidl.tensor(x)).tanh())
        loss = (
            F.cross_entropy(logits, y)
            if gather_head
            else tp.vocab_parallel_cross_entropy(logits, y, col.out_range.start, counting)
        )
        loss.backward()
        opt.step()
    sent = counting.bytes_sent
    gathered = [*tp.gather_linear(mlp.fc1), *tp.gather_linear(mlp.fc2), *tp.gather_linear(col)]
    return gathered, sent


def train_lm(comm, layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> dict:
    """The LM of tests/test_model_parallel.py with its decoder (the last unit's Linear) split by vocabulary and
    the vocabulary-parallel loss (compare with its ``train_lm_dense``): the dense state dict on every rank."""
    units, decoder, name = tp.shard_last_unit(make_lm(layers).units(), False, comm)
    net = nn.Sequential(*(u for _, u in units))
    own = list(decoder.parameters())
    replicated = [p for p in net.parameters() if all(p is not q for q in own)]
    opt = optim.SGD(net.parameters(), lr=0.7)
    for x, y in lm_batches(steps):
        for _, unit in units:
            if isinstance(unit, Recurrent):
                unit.start_window()
        logits = net(x)
        opt.zero_grad()
        tp.vocab_parallel_cross_entropy(logits, y.reshape(-1), decoder.out_range.start, comm).backward()
        mp.clip_grad_norm_split(own, max_norm, comm, replicated)
        opt.step()
    state = mp.dense_names(net.state_dict(), [n for n, _ in units])
    state[f"{name}.weight"], state[f"{name}.bias"] = tp.gather_linear(decoder)
    return state


# ----------------------------------------------------------------------------- shards
@settings(max_examples=30, deadline=None)
@given(st.integers(1, 40), st.integers(1, 8))
def test_shard_ranges_tile_the_features(n, size):
    if n < size:
        with pytest.raises(ValueError, match="at least one"):
            tp.shard_range(n, 0, size)
        return
    parts = [tp.shard_range(n, r, size) for r in range(size)]
    assert [i for s in parts for i in range(s.start, s.stop)] == list(range(n))
    lengths = [s.stop - s.start for s in parts]
    assert max(lengths) - min(lengths) <= 1 and lengths == sorted(lengths, reverse=True)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_shard_then_gather_gives_the_dense_layer_back(P):
    minidl.manual_seed(0)
    dense = nn.Linear(9, 7)

    def fn(comm):
        col = tp.ColumnParallelLinear.from_dense(dense, comm=comm)
        row = tp.RowParallelLinear.from_dense(dense, comm=comm)
        assert col.weight.shape == (
            tp.shard_range(7, comm.Get_rank(), P).stop - tp.shard_range(7, comm.Get_rank(), P).start,
            9,
        )
        return tp.gather_linear(col), tp.gather_linear(row)

    for (cw, cb), (rw, rb) in collectives.simulate(P, fn):
        for w, b in ((cw, cb), (rw, rb)):
            np.testing.assert_array_equal(w, dense.weight.data)
            np.testing.assert_array_equal(b, dense.bias.data)


def test_default_init_is_the_dense_init_of_the_same_seed():
    minidl.manual_seed(5)
    dense = nn.Linear(6, 10)

    def fn(comm):
        minidl.manual_seed(5)  # each simulated rank is a thread with its own generator
        return tp.gather_linear(tp.ColumnParallelLinear(6, 10, comm=comm))

    for w, b in collectives.simulate(3, fn):
        np.testing.assert_array_equal(w, dense.weight.data)
        np.testing.assert_array_equal(b, dense.bias.data)


# ----------------------------------------------------------------------------- layers against dense
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_column_row_and_mlp_forward_backward_equal_dense(P):
    fc1, fc2, head = make_mlp_block()
    x0 = mlp_batches(1)[0][0]
    r = np.random.default_rng(0).standard_normal((8, 7))
    x = minidl.tensor(x0, requires_grad=True)
    # dense: column(head, gathered) o row(fc2, whole input) o relu o fc1
    y = head(fc2(fc1(x).relu()))
    (y * r).sum().backward()
    want = {
        "x": x.grad,
        "fc1": fc1.weight.grad,
        "fc2": fc2.weight.grad,
        "head": head.weight.grad,
        "head.b": head.bias.grad,
        "fc2.b": fc2.bias.grad,
    }

    def fn(comm):
        a = tp.ColumnParallelLinear.from_dense(fc1, gather_output=True, comm=comm)
        b = tp.RowParallelLinear.from_dense(fc2, input_is_parallel=False, comm=comm)
        c = tp.ColumnParallelLinear.from_dense(head, gather_output=True, comm=comm)
        xt = minidl.tensor(x0, requires_grad=True)
        out = c(b(a(xt).relu()))
        (out * r).sum().backward()
        gw = {
            "fc1": tp.gather_linear(a, grad=True)[0],
            "fc2": tp.gather_linear(b, grad=True)[0],
            "head": tp.gather_linear(c, grad=True)[0],
            "head.b": tp.gather_linear(c, grad=True)[1],
            "fc2.b": b.bias.grad,
        }
        return out.data, xt.grad, gw

    for out, xg, gw in collectives.simulate(P, fn):
        assert_close(out, y.data)
        assert_close(xg, want["x"], what="x")
        for k, v in gw.items():
            assert_close(v, want[k], what=k)


@pytest.mark.parametrize("P", [2, 3])
def test_f_and_g_gradcheck_through_the_parallel_mlp(P):
    """Analytic gradients of the split MLP against central differences of its own split forward."""
    fc1, fc2, _ = make_mlp_block()
    x0 = mlp_batches(1)[0][0][:3]
    r = np.random.default_rng(1).standard_normal((3, 5))

    def run(w1, x, backward):
        def fn(comm):
            block = tp.ParallelMLP(6, 11, 5, comm=comm, dense=((w1, fc1.bias.data), fc2))
            xt = minidl.tensor(x, requires_grad=True)
            loss = (block(xt).tanh() * r).sum()
            if backward:
                loss.backward()
                return xt.grad, tp.gather_linear(block.fc1, grad=True)[0]
            return loss.item()

        return collectives.simulate(P, fn)

    analytic = run(fc1.weight.data, x0, True)
    numeric = numerical_grad(lambda w1, x: minidl.tensor(run(w1.data, x.data, False)[0]), [fc1.weight.data, x0])
    for xg, wg in analytic:
        assert_close(xg, numeric[1], rtol=1e-6, what="x")
        assert_close(wg, numeric[0], rtol=1e-6, what="fc1.weight")


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_vocab_parallel_cross_entropy_equals_cross_entropy(P):
    rng = np.random.default_rng(3)
    z0, target = rng.standard_normal((6, 9)) * 4, rng.integers(0, 9, 6)
    z = minidl.tensor(z0, requires_grad=True)
    loss = F.cross_entropy(z, target)
    loss.backward()

    def fn(comm):
        part = tp.shard_range(9, comm.Get_rank(), P)
        zr = minidl.tensor(z0[:, part], requires_grad=True)
        lr = tp.vocab_parallel_cross_entropy(zr, target, part.start, comm)
        lr.backward()
        return lr.item(), zr.grad, part

    for value, grad, part in collectives.simulate(P, fn):
        assert value == pytest.approx(loss.item(), rel=1e-12)
        assert_close(grad, z.grad[:, part])


def test_vocab_parallel_cross_entropy_rejects_bad_input():
    def fn(comm):
        with pytest.raises(ValueError, match="integer target"):
            tp.vocab_parallel_cross_entropy(minidl.tensor(np.zeros((3, 2))), np.zeros(3), 0, comm)
        with pytest.raises(ValueError, match="empty batch"):
            tp.vocab_parallel_cross_entropy(minidl.tensor(np.zeros((0, 2))), np.zeros(0, int), 0, comm)
        return True

    assert collectives.simulate(1, fn)[0]


def test_misuse_gives_clear_errors():
    minidl.manual_seed(0)
    dense = nn.Linear(4, 3)

    def fn(comm):
        with pytest.raises(ValueError, match="at least one"):
            tp.ColumnParallelLinear.from_dense(dense, comm=comm)  # 3 outputs over 4 ranks
        row = tp.RowParallelLinear.from_dense(dense, comm=comm)
        with pytest.raises(ValueError, match="last dimension must be 1"):
            row(minidl.tensor(np.zeros((2, 4))))
        with pytest.raises(ValueError, match="expected \\[5, 4\\]"):
            tp.RowParallelLinear(4, 5, comm=comm, dense=dense)
        with pytest.raises(ValueError, match="style"):
            tp.shard_linear(dense.weight.data, None, "diagonal", 0, 2)
        return True

    assert all(collectives.simulate(4, fn))


# ----------------------------------------------------------------------------- training exactness
@pytest.mark.parametrize("P", [1, 2, 3, 4])
@pytest.mark.parametrize("gather_head", [True, False])
def test_tensor_parallel_mlp_trains_exactly_as_one_process(P, gather_head):
    want = train_mlp_dense()
    for got, _ in collectives.simulate(P, train_mlp, STEPS, gather_head):
        for g, w in zip(got, want):
            assert_close(g, w)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_tensor_parallel_lm_trains_exactly_as_one_process(P):
    want = train_lm_dense()
    for got in collectives.simulate(P, train_lm):
        assert sorted(got) == sorted(want)
        for k in want:
            assert_close(got[k], want[k], what=k)


# ----------------------------------------------------------------------------- communication volume
def test_parallel_mlp_moves_one_allreduce_each_way():
    """Without checks: forward allreduces [N, out] after fc2, backward [N, in] before fc1, and
    nothing else (ring allreduce of n floats sends 2 (P-1)/P n of them per rank, when P divides n)."""
    P, N = 2, 4
    fc1, fc2, _ = make_mlp_block()  # 6 -> 11 -> 5

    def fn(comm):
        counting = CountingComm(comm)
        block = tp.ParallelMLP.from_dense(fc1, nn.ReLU(), fc2, comm=counting, check=False)
        x = minidl.tensor(np.ones((N, 6)), requires_grad=True)
        y = block(x)
        forward = counting.reset()
        y.sum().backward()
        return forward, counting.reset()

    for (fm, fb), (bm, bb) in collectives.simulate(P, fn):
        assert fb == 2 * (P - 1) * N * 5 * 8 // P  # [4, 5] float64
        assert bb == 2 * (P - 1) * N * 6 * 8 // P  # [4, 6] float64
        assert fm == bm == 2 * (P - 1)


def test_vocab_parallel_cross_entropy_gradcheck():
    """minidl.gradcheck on one rank; across three ranks, the split loss's analytic gradient against
    central differences of the split loss itself."""
    rng = np.random.default_rng(6)
    z0, target = rng.standard_normal((4, 7)), rng.integers(0, 7, 4)
    assert collectives.simulate(
        1, lambda comm: minidl.gradcheck(lambda z: tp.vocab_parallel_cross_entropy(z, target, 0, comm), [z0])
    )[0]

    def run(z, backward):
        def fn(comm):
            part = tp.shard_range(7, comm.Get_rank(), comm.Get_size())
            zr = minidl.tensor(z[:, part], requires_grad=True)
            loss = tp.vocab_parallel_cross_entropy(zr, target, part.start, comm)
            if backward:
                loss.backward()
                return zr.grad
            return loss.item()

        return collectives.simulate(3, fn)

    analytic = np.concatenate(list(run(z0, True)), axis=1)
    numeric = numerical_grad(lambda z: minidl.tensor(run(z.data, False)[0]), [z0])[0]
    assert_close(analytic, numeric, rtol=1e-6)


def test_vocab_parallel_cross_entropy_backward_twice_with_retain_graph():
    """The backward must not edit its saved softmax in place: a second backward (retain_graph) gives the same grad."""
    rng = np.random.default_rng(4)
    z0, target = rng.standard_normal((5, 4)), rng.integers(0, 4, 5)

    def fn(comm):
        z = minidl.tensor(z0, requires_grad=True)
        loss = tp.vocab_parallel_cross_entropy(z, target, 0, comm)
        loss.backward(retain_graph=True)
        first = z.grad.copy()
        loss.backward()
        return first, z.grad

    first, both = collectives.simulate(1, fn)[0]
    assert_close(both, 2 * first)
