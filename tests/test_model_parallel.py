"""Layer-wise model parallelism on the simulated communicator: p2p send/recv in the graph, split
Sequential and split LSTM LM train exactly as one process does (float64, 1e-8 relative), the
bytes on the wire are the activations and their gradients, and bad use fails clearly.

The scenario functions (``train_sequential``, ``train_lm``, ...) take a communicator and are
reused by tests/mpi/test_model_parallel_mpi.py under mpiexec.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.counting import CountingComm
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import p2p
from minidl.gradcheck import numerical_grad
from minidl.models.lm import LSTMLanguageModel, Recurrent

STEPS = 3
RTOL = 1e-8


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def assert_same_state(got: dict, want: dict, rtol: float = RTOL) -> None:
    assert sorted(got) == sorted(want)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=rtol, atol=rtol * np.abs(want[k]).max(), err_msg=k)


# ----------------------------------------------------------------------------- scenarios (shared with tests/mpi)
def make_mlp(depth: int = 6) -> nn.Sequential:
    """Linear/Tanh/ReLU layers alternating: `depth` Linear layers, 2*depth - 1 modules."""
    minidl.manual_seed(7)
    layers: list[nn.Module] = []
    widths = [5, 8, 7, 6, 9, 4, 3, 5, 6][: depth + 1]
    for i in range(depth):
        layers.append(nn.Linear(widths[i], widths[i + 1]))
        if i < depth - 1:
            layers.append(nn.Tanh() if i % 2 else nn.ReLU())
    return nn.Sequential(*layers)


def mlp_batches(steps: int = STEPS, batch: int = 6) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(11)
    return [(rng.standard_normal((batch, 5)), rng.integers(0, 3, batch)) for _ in range(steps)]


def make_lm(layers: int = 2) -> LSTMLanguageModel:
    minidl.manual_seed(3)
    return LSTMLanguageModel(13, 6, num_layers=layers, init_scale=0.3)


def lm_batches(steps: int = STEPS) -> list[tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(5)
    return [(rng.integers(0, 13, (4, 3)), rng.integers(0, 13, (4, 3))) for _ in range(steps)]


def train_sequential_dense(steps: int = STEPS) -> dict:
    model = make_mlp()
    opt = optim.SGD(model.parameters(), lr=0.3, momentum=0.9)
    for x, y in mlp_batches(steps):
        opt.zero_grad()
        F.cross_entropy(model(minidl.tensor(x)), y).backward()
        opt.step()
    return model.state_dict()


def train_sequential(comm, steps: int = STEPS, balance=None) -> tuple[dict | None, int]:
    """k SGD steps of the split MLP; returns (the gathered state on rank 0, bytes this rank sent)."""
    counting = CountingComm(comm)
    stage = mp.SequentialStage(make_mlp(), counting, balance=balance)
    params = list(stage.parameters())  # empty for a stage of only activations (balance [5, 1, 5])
    opt = optim.SGD(params, lr=0.3, momentum=0.9) if params else None
    for x, y in mlp_batches(steps):
        stage.zero_grad()
        out = stage(minidl.tensor(x) if stage.is_first else None)
        (F.cross_entropy(out, y) if stage.is_last else out).backward()
        if opt:
            opt.step()
    sent = counting.bytes_sent
    return mp.gather_state_dict(stage, comm=comm), sent


def train_lm_dense(layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> dict:
    model = make_lm(layers)
    opt = optim.SGD(model.parameters(), lr=0.7)
    state = None
    for x, y in lm_batches(steps):
        logits, state = model(x, None if state is None else model.detach_state(state))
        opt.zero_grad()
        F.cross_entropy(logits, y.reshape(-1)).backward()
        optim.clip_grad_norm(list(model.parameters()), max_norm)
        opt.step()
    return model.state_dict()


def train_lm(comm, layers: int = 2, steps: int = STEPS, max_norm: float = 0.1) -> tuple[dict | None, int]:
    """Truncated BPTT on the LM's units split over the ranks, with global-norm clipping; (gathered state on
    rank 0 under the model's own names, bytes sent)."""
    counting = CountingComm(comm)
    units = make_lm(layers).units()
    stage = mp.SequentialStage(units, counting)
    opt = optim.SGD(stage.parameters(), lr=0.7)
    for x, y in lm_batches(steps):
        for _, unit in units:
            if isinstance(unit, Recurrent):
                unit.start_window()  # the LSTM states go on to the next window, their history does not
        out = stage(x if stage.is_first else None)
        opt.zero_grad()
        (F.cross_entropy(out, y.reshape(-1)) if stage.is_last else out).backward()
        mp.clip_grad_norm_split(stage.parameters(), max_norm, comm)
        opt.step()
    counted = counting.bytes_sent
    return mp.gather_state_dict(stage, comm=comm, names=[n for n, _ in units]), counted


# ----------------------------------------------------------------------------- partition
@settings(max_examples=30, deadline=None)
@given(st.lists(st.integers(0, 9), min_size=1, max_size=7), st.integers(1, 7))
def test_partition_is_optimal_and_contiguous(costs, parts):
    if parts > len(costs):
        with pytest.raises(ValueError, match="non-empty stages"):
            mp.partition(costs, parts)
        return
    ranges = mp.partition(costs, parts)
    assert [i for r in ranges for i in r] == list(range(len(costs)))
    assert all(len(r) > 0 for r in ranges)
    best = min(
        max(sum(costs[a:b]) for a, b in zip((0, *cuts), (*cuts, len(costs))))
        for cuts in itertools.combinations(range(1, len(costs)), parts - 1)
    )
    assert max(sum(costs[i] for i in r) for r in ranges) == best


def test_stage_ranges_balance_forms():
    assert mp.stage_ranges(7, 3, None) == [range(0, 3), range(3, 5), range(5, 7)]
    assert mp.stage_ranges(7, 3, [1, 4, 2]) == [range(0, 1), range(1, 5), range(5, 7)]
    assert mp.stage_ranges(4, 2, "parameters", [100, 0, 0, 100]) == [range(0, 2), range(2, 4)]
    with pytest.raises(ValueError, match="summing to 7"):
        mp.stage_ranges(7, 3, [1, 1, 1])
    with pytest.raises(ValueError, match="non-empty stages"):
        mp.stage_ranges(2, 3, None)


# ----------------------------------------------------------------------------- p2p ops
W0 = np.random.default_rng(1).standard_normal((3, 4))
W1 = np.random.default_rng(2).standard_normal((4, 2))
X0 = np.random.default_rng(3).standard_normal((5, 3))


def two_rank_chain(comm, w0: np.ndarray, w1: np.ndarray, x: np.ndarray, backward: bool = True):
    """tanh(x w0) on rank 0, sent to rank 1, which computes sum(sin-free (h w1)^2); grads of w0 / w1 and x."""
    if comm.Get_rank() == 0:
        w, xt = minidl.tensor(w0, requires_grad=True), minidl.tensor(x, requires_grad=True)
        token = p2p.send((xt @ w).tanh(), 1, comm, tag=4)
        if backward:
            token.backward()
        return w.grad, xt.grad
    w = minidl.tensor(w1, requires_grad=True)
    h = p2p.recv((x.shape[0], w0.shape[1]), np.float64, 0, comm, tag=4)
    loss = ((h @ w) ** 2).sum()
    if backward:
        loss.backward()
    return w.grad, loss.item()


def test_send_recv_gradients_equal_single_process():
    res = collectives.simulate(2, two_rank_chain, W0, W1, X0)
    w0, w1, x = (minidl.tensor(a, requires_grad=True) for a in (W0, W1, X0))
    loss = (((x @ w0).tanh() @ w1) ** 2).sum()
    loss.backward()
    np.testing.assert_allclose(res[0][0], w0.grad, rtol=1e-12)
    np.testing.assert_allclose(res[0][1], x.grad, rtol=1e-12)
    np.testing.assert_allclose(res[1][0], w1.grad, rtol=1e-12)
    assert res[1][1] == pytest.approx(loss.item(), rel=1e-14)


def test_send_recv_gradcheck_across_ranks():
    """The split graph's analytic gradients against central differences of the split forward itself."""
    analytic = collectives.simulate(2, two_rank_chain, W0, W1, X0)

    def split_loss(w0, w1, x):
        res = collectives.simulate(2, two_rank_chain, w0.data, w1.data, x.data, False)
        return minidl.tensor(res[1][1])

    numeric = numerical_grad(split_loss, [W0, W1, X0])
    np.testing.assert_allclose(analytic[0][0], numeric[0], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(analytic[1][0], numeric[1], rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(analytic[0][1], numeric[2], rtol=1e-6, atol=1e-8)


def test_integer_and_no_grad_sends_travel_forward_only():
    def fn(comm):
        if comm.Get_rank() == 0:
            t = p2p.send(np.arange(6).reshape(2, 3), 1, comm)
            with minidl.no_grad():
                t2 = p2p.send(minidl.tensor(np.ones(4), requires_grad=True), 1, comm)
            return t.requires_grad, t2.requires_grad
        ids = p2p.recv((2, 3), np.int64, 0, comm)
        with minidl.no_grad():
            f = p2p.recv((4,), np.float64, 0, comm)
        return ids.data.tolist(), f.requires_grad

    res = collectives.simulate(2, fn)
    assert res[0] == (False, False)
    assert res[1] == ([[0, 1, 2], [3, 4, 5]], False)
    assert len(res.messages) == 2  # no gradient messages


def test_send_records_even_when_the_input_needs_no_grad():
    """The receiver's backward sends a gradient whatever the sender's input: the sender must take it."""

    def fn(comm):
        if comm.Get_rank() == 0:
            token = p2p.send(minidl.tensor(np.ones(3)), 1, comm)
            token.backward()
            return token.requires_grad
        x = p2p.recv((3,), np.float64, 0, comm)
        (x * 2).sum().backward()
        return x.requires_grad

    assert list(collectives.simulate(2, fn)) == [True, True]


def test_recv_of_the_wrong_size_names_the_shapes():
    def fn(comm):
        if comm.Get_rank() == 0:
            comm.Send(np.zeros(3), dest=1, tag=0)
            return None
        p2p.recv((4,), np.float64, 0, comm)

    with pytest.raises(
        ValueError,
        match=r"expected 112 bytes \(float64 \(4,\) after a 80-byte description\).*got a message of 24 bytes",
    ):
        collectives.simulate(2, fn)


def test_bad_peers_and_tags():
    def fn(comm):
        with pytest.raises(ValueError, match="this rank"):
            p2p.send(np.ones(2), comm.Get_rank(), comm)
        with pytest.raises(ValueError, match="out of range"):
            p2p.recv((2,), np.float64, 5, comm)
        with pytest.raises(ValueError, match="tag"):
            p2p.send(np.ones(2), 1 - comm.Get_rank(), comm, tag=-1)
        return True

    assert all(collectives.simulate(2, fn))


def test_meta_headers_round_trip_shapes_and_dtypes():
    arrays = [
        np.zeros((2, 3, 4), np.float32),
        np.zeros((), np.float64),
        np.zeros((0, 5), np.int64),
        np.zeros((1,) * 8, np.uint8),
    ]

    def fn(comm):
        if comm.Get_rank() == 0:
            for a in arrays:
                p2p.send_meta(a, 1, comm)
            with pytest.raises(ValueError, match="at most 8"):
                p2p.send_meta(np.zeros((1,) * 9), 1, comm)
            with pytest.raises(TypeError, match="complex128"):
                p2p.send_meta(np.zeros(2, np.complex128), 1, comm)
            return None
        return [p2p.recv_meta(0, comm) for _ in arrays]

    got = collectives.simulate(2, fn)[1]
    assert got == [(a.shape, a.dtype) for a in arrays]


def test_counting_comm_counts_every_send_path():
    def fn(comm):
        c = CountingComm(comm)
        peer = 1 - comm.Get_rank()
        for first in (0, 1):  # synchronous sends: one rank sends while the other receives
            if comm.Get_rank() == first:
                c.Send(np.zeros(3), peer, 0)
                request = c.Isend(np.zeros(5, np.float32), peer, 1)
                comm.Recv(np.zeros(3), peer, 3)
                request.Wait()
            else:
                comm.Recv(np.zeros(3), peer, 0)
                comm.Send(np.zeros(3), peer, 3)
                comm.Recv(np.zeros(5, np.float32), peer, 1)
        c.Sendrecv(np.zeros(2), peer, 2, np.zeros(2), peer, 2)
        return c.reset(), c.bytes_sent

    assert list(collectives.simulate(2, fn)) == [((3, 24 + 20 + 16), 0)] * 2


# ----------------------------------------------------------------------------- whole models: exactness
@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_split_sequential_trains_exactly_as_one_process(P):
    want = train_sequential_dense()
    res = collectives.simulate(P, train_sequential)
    assert_same_state(res[0][0], want)


def test_split_sequential_with_a_stage_without_parameters():
    want = train_sequential_dense()
    res = collectives.simulate(3, train_sequential, STEPS, [5, 1, 5])
    assert_same_state(res[0][0], want)


@pytest.mark.parametrize("P", [1, 2, 3, 4])
def test_split_lm_trains_exactly_as_one_process(P):
    want = train_lm_dense()
    res = collectives.simulate(P, train_lm)
    assert_same_state(res[0][0], want)


def test_split_lm_five_units_on_five_ranks():
    want = train_lm_dense(layers=3)
    res = collectives.simulate(5, train_lm, 3)
    assert_same_state(res[0][0], want)


# ----------------------------------------------------------------------------- communication volume
def test_bytes_sent_are_activations_forward_and_gradients_back():
    """Stage r sends a header and its output activation forward, and dL/d(its input) back."""
    P, batch = 3, 6
    res = collectives.simulate(P, train_sequential, 1)
    layers = list(make_mlp())
    ranges = mp.stage_ranges(len(layers), P, None)

    def width_after(i):  # the width of the activation leaving layer i
        return next(m.out_features for m in reversed(layers[: i + 1]) if isinstance(m, nn.Linear))

    for r in range(P):
        forward = mp.HEADER_BYTES + batch * width_after(ranges[r][-1]) * 8 if r < P - 1 else 0
        backward = batch * width_after(ranges[r - 1][-1]) * 8 if r > 0 else 0
        assert res[r][1] == forward + backward
    boundaries = [mp.boundary_bytes((batch, width_after(ranges[r][-1])), 8) for r in range(P - 1)]
    assert sum(sent for _, sent in res) == sum(boundaries)


def test_lm_stage_bytes_per_step():
    """[T, B, H] activations forward, as many gradient bytes back, at each of the P-1 boundaries
    (the clipping allreduce runs on the uncounted communicator)."""
    P, steps, (T, B), H = 4, 2, lm_batches(1)[0][0].shape, 6
    res = collectives.simulate(P, train_lm, 2, steps)
    for r in range(P):
        expected = (mp.HEADER_BYTES + T * B * H * 8 if r < P - 1 else 0) + (T * B * H * 8 if r > 0 else 0)
        assert res[r][1] == steps * expected


# ----------------------------------------------------------------------------- misuse
def test_too_many_ranks_for_the_layers():
    def fn(comm):
        mp.SequentialStage(make_lm(1).units(), comm)  # 3 units: embedding, one LSTM layer, decoder

    with pytest.raises(ValueError, match="3 layers into 4 non-empty stages"):
        collectives.simulate(4, fn)

    def fn2(comm):
        mp.SequentialStage(nn.Sequential(nn.Linear(2, 2)), comm)

    with pytest.raises(ValueError, match="non-empty stages"):
        collectives.simulate(2, fn2)


def test_first_stage_needs_input_and_types_are_checked():
    def fn(comm):
        stage = mp.SequentialStage(nn.Sequential(nn.Linear(2, 2)), comm)
        with pytest.raises(ValueError, match="needs the model's input"):
            stage()
        with pytest.raises(TypeError, match="nn.Sequential"):
            mp.SequentialStage(nn.Linear(2, 2), comm)
        lm = mp.SequentialStage(make_lm(1).units(), comm)
        with pytest.raises(ValueError, match="integer token ids"):
            lm(np.zeros((2, 2)))
        return True

    assert collectives.simulate(1, fn)[0]


def test_eval_forward_under_no_grad_sends_no_gradients():
    def fn(comm):
        stage = mp.SequentialStage(make_lm(2).units(), comm)
        stage.eval()
        with minidl.no_grad():
            out = stage(lm_batches(1)[0][0] if stage.is_first else None)
        return out.shape if stage.is_last else None

    model = make_lm(2)
    res = collectives.simulate(3, fn)
    assert res[2] == (12, model.vocab_size)
    assert len(res.messages) == 2 * 2  # header + activation at each of two boundaries, nothing back


def test_lm_stage_places_dropout_where_the_dense_model_does():
    """On one rank the stage of the LM's units draws the same dropout masks in the same order as the dense model, so
    training-mode outputs and gradients agree exactly (embedding, between LSTM layers, before the decoder)."""
    x, y = lm_batches(1)[0]

    def dense():
        minidl.manual_seed(3)
        model = LSTMLanguageModel(13, 6, num_layers=3, dropout=0.4, init_scale=0.3)
        logits, _ = model(x)
        F.cross_entropy(logits, y.reshape(-1)).backward()
        return logits.data, {k: p.grad for k, p in model.named_parameters()}

    def split(comm):
        minidl.manual_seed(3)
        units = LSTMLanguageModel(13, 6, num_layers=3, dropout=0.4, init_scale=0.3).units()
        stage = mp.SequentialStage(units, comm)
        logits = stage(x)
        F.cross_entropy(logits, y.reshape(-1)).backward()
        return logits.data, mp.dense_names({k: p.grad for k, p in stage.named_parameters()}, [n for n, _ in units])

    want_out, want_grads = dense()
    got_out, got_grads = collectives.simulate(1, split)[0]
    np.testing.assert_array_equal(got_out, want_out)
    assert sorted(got_grads) == sorted(want_grads)
    for k in want_grads:
        np.testing.assert_array_equal(got_grads[k], want_grads[k], err_msg=k)
