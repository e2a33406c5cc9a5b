"""The fused whole-sequence LSTM against the composed LSTMCell, gradchecks, and nn.LSTM's behaviour."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
from minidl import nn
from minidl.nn.lstm_kernel import LSTMFunction, sigmoid_row_scale
from minidl.nn.rnn import lstm_cell
from minidl.random import manual_seed


def _t(rng, *shape, scale=0.5):
    return minidl.tensor(rng.standard_normal(shape) * scale, requires_grad=True)


def _unrolled(cells, x, h0, c0):
    """The composed reference: LSTMCells stepped over time, layer by layer. Returns out [T,B,H], h_n, c_n."""
    layer_in = [x[t] for t in range(x.shape[0])]
    hs, cs = [], []
    for k, cell in enumerate(cells):
        h, c = h0[k], c0[k]
        outs = []
        for xt in layer_in:
            h, c = cell(xt, (h, c))
            outs.append(h)
        layer_in = outs
        hs.append(h)
        cs.append(c)
    stack = minidl.ops.Stack.apply
    return stack(*layer_in), stack(*hs), stack(*cs)


def _cells_like(lstm):
    """LSTMCells holding copies of an nn.LSTM's per-layer weights."""
    cells = []
    for k in range(lstm.num_layers):
        cell = nn.LSTMCell(lstm.input_size if k == 0 else lstm.hidden_size, lstm.hidden_size, bias=lstm.bias)
        cell.load_state_dict({n: getattr(lstm, f"{n}_l{k}").data for n, _ in cell.named_parameters()})
        cells.append(cell)
    return cells


@pytest.mark.parametrize("num_layers,bias", [(1, True), (2, True), (2, False)])
def test_fused_matches_composed_float64(rng, num_layers, bias):
    """Outputs and every gradient (weights, input, h0/c0, and through h_n/c_n) agree to 1e-6."""
    minidl.set_default_dtype(np.float64)
    T, B, I, H = 6, 3, 5, 4
    lstm = nn.LSTM(I, H, num_layers=num_layers, bias=bias)
    cells = _cells_like(lstm)
    x, h0, c0 = _t(rng, T, B, I), _t(rng, num_layers, B, H), _t(rng, num_layers, B, H)
    r_out, r_h, r_c = (rng.standard_normal(s) for s in [(T, B, H), (num_layers, B, H), (num_layers, B, H)])

    def loss_and_grads(outputs, params):
        out, h, c = outputs
        loss = (out * r_out).sum() + (h * r_h).sum() + (c * r_c).sum()
        for p in [x, h0, c0, *params]:
            p.grad = None
        loss.backward()
        return [o.data for o in outputs], [p.grad.copy() for p in [x, h0, c0, *params]]

    out, (h, c) = lstm(x, (h0, c0))
    fused_vals, fused_grads = loss_and_grads((out, h, c), list(lstm.parameters()))
    cell_params = [p for cell in cells for p in cell.parameters()]
    ref_vals, ref_grads = loss_and_grads(_unrolled(cells, x, h0, c0), cell_params)
    for a, b in zip(fused_vals, ref_vals):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert len(fused_grads) == len(ref_grads)
    for a, b in zip(fused_grads, ref_grads):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-6)
    assert all(np.abs(g).max() > 0 for g in fused_grads)  # every gradient actually flowed


@settings(max_examples=15)
@given(
    T=st.integers(0, 5),
    B=st.integers(1, 3),
    I=st.integers(1, 4),
    H=st.integers(1, 4),
    L=st.integers(1, 3),
    seed=st.integers(0, 2**16),
)
def test_fused_matches_composed_any_shape(T, B, I, H, L, seed):
    """The same agreement over random sizes, including T = 0 (the state passes through unchanged)."""
    minidl.set_default_dtype(np.float64)
    rng = np.random.default_rng(seed)
    lstm = nn.LSTM(I, H, num_layers=L)
    cells = _cells_like(lstm)
    x, h0, c0 = _t(rng, T, B, I), _t(rng, L, B, H), _t(rng, L, B, H)
    out, (h, c) = lstm(x, (h0, c0))
    ((h * 2.0).sum() + c.sum() + (out * out).sum()).backward()
    grads = [g.grad.copy() for g in (x, h0, c0)]
    if T == 0:
        np.testing.assert_array_equal(h.data, h0.data)
        np.testing.assert_array_equal(grads[2], np.ones((L, B, H)))
        return
    for p in (x, h0, c0):
        p.grad = None
    ref_out, ref_h, ref_c = _unrolled(cells, x, h0, c0)
    ((ref_h * 2.0).sum() + ref_c.sum() + (ref_out * ref_out).sum()).backward()
    np.testing.assert_allclose(out.data, ref_out.data, atol=1e-6)
    for g, p in zip(grads, (x, h0, c0)):
        np.testing.assert_allclose(g, p.grad, atol=1e-6)


def test_fused_function_gradcheck(rng):
    T, B, I, H = 4, 2, 3, 3
    inputs = [
        rng.standard_normal(s) * 0.5 for s in [(T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,)]
    ]
    assert minidl.gradcheck(lambda *a: LSTMFunction.apply(*a), inputs)


def test_fused_function_gradcheck_no_bias_saturated(rng):
    """Large pre-activations (gates near 0 or 1) still give exact gradients; no bias arrays."""
    T, B, I, H = 3, 2, 2, 2
    inputs = [rng.standard_normal(s) * 2.0 for s in [(T, B, I), (B, H), (B, H), (4 * H, I), (4 * H, H)]]
    assert minidl.gradcheck(lambda *a: LSTMFunction.apply(*a), inputs)


def test_lstm_cell_gradcheck(rng):
    B, I, H = 2, 3, 4
    inputs = [
        rng.standard_normal(s) * 0.5 for s in [(B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,)]
    ]
    assert minidl.gradcheck(lambda *a: lstm_cell(*a), inputs)


def test_lstmcell_module_uses_its_parameters(rng):
    cell = nn.LSTMCell(3, 4)
    x, h, c = (minidl.tensor(rng.standard_normal(s).astype(np.float32)) for s in [(2, 3), (2, 4), (2, 4)])
    h1, c1 = cell(x, (h, c))
    h2, c2 = lstm_cell(x, h, c, cell.weight_ih, cell.weight_hh, cell.bias_ih, cell.bias_hh)
    np.testing.assert_array_equal(h1.data, h2.data)
    np.testing.assert_array_equal(c1.data, c2.data)
    h0, c0 = cell(x)  # missing state = zeros
    hz, cz = cell(x, (np.zeros((2, 4), np.float32), np.zeros((2, 4), np.float32)))
    np.testing.assert_array_equal(h0.data, hz.data)
    assert [n for n, _ in cell.named_parameters()] == ["weight_ih", "weight_hh", "bias_ih", "bias_hh"]


def test_sigmoid_row_scale_halves_the_sigmoid_gates_in_pytorch_order():
    scale = sigmoid_row_scale(3, np.float32)  # H = 3: PyTorch rows i 0-2, f 3-5, g 6-8, o 9-11
    assert scale.shape == (12, 1) and scale.dtype == np.float32
    np.testing.assert_array_equal(scale[:, 0], [0.5] * 6 + [1] * 3 + [0.5] * 3)


def test_float32_in_float32_out(rng):
    lstm = nn.LSTM(3, 5, num_layers=2)
    x = minidl.tensor(rng.standard_normal((4, 2, 3)).astype(np.float32))
    out, (h, c) = lstm(x)
    assert out.dtype == np.float32 and h.dtype == np.float32 and c.dtype == np.float32
    assert out.shape == (4, 2, 5) and h.shape == (2, 2, 5) and c.shape == (2, 2, 5)
    np.testing.assert_array_equal(out.data[-1], h.data[-1])  # the top layer's last output is h_n


def test_batch_first_is_a_transpose(rng):
    lstm = nn.LSTM(3, 4, batch_first=True)
    x = rng.standard_normal((2, 5, 3)).astype(np.float32)
    out_bf, (h_bf, _) = lstm(minidl.tensor(x))
    lstm.batch_first = False
    out, (h, _) = lstm(minidl.tensor(x.transpose(1, 0, 2)))
    np.testing.assert_allclose(out_bf.data, out.data.transpose(1, 0, 2))
    np.testing.assert_allclose(h_bf.data, h.data)


def test_state_carries_over_windows(rng):
    """Running two windows with the state passed along equals running the whole sequence."""
    lstm = nn.LSTM(3, 4, num_layers=2)
    x = minidl.tensor(rng.standard_normal((8, 2, 3)).astype(np.float32))
    whole, (h, c) = lstm(x)
    first, state = lstm(x[:5])
    second, (h2, c2) = lstm(x[5:], state)
    np.testing.assert_allclose(np.concatenate([first.data, second.data]), whole.data, atol=1e-6)
    np.testing.assert_allclose(h2.data, h.data, atol=1e-6)
    np.testing.assert_allclose(c2.data, c.data, atol=1e-6)


def test_dropout_between_layers_only_in_training(rng):
    manual_seed(0)
    lstm = nn.LSTM(3, 8, num_layers=2, dropout=0.5)
    x = minidl.tensor(rng.standard_normal((4, 2, 3)).astype(np.float32))
    lstm.eval()
    a, _ = lstm(x)
    b, _ = lstm(x)
    np.testing.assert_array_equal(a.data, b.data)  # deterministic in eval
    lstm.train()
    c, _ = lstm(x)
    assert not np.allclose(a.data, c.data)  # the mask between the layers changes the output
    one = nn.LSTM(3, 8, num_layers=1, dropout=0.5)  # nothing between layers: no effect
    one.train()
    d1, _ = one(x)
    one.eval()
    d2, _ = one(x)
    np.testing.assert_array_equal(d1.data, d2.data)


def test_init_ranges():
    lstm = nn.LSTM(10, 16, num_layers=2)
    bound = 1 / np.sqrt(16)
    for name, p in lstm.named_parameters():
        assert np.abs(p.data).max() <= bound, name
        assert np.abs(p.data).max() > 0.5 * bound, name
    lstm.init_uniform(0.04)
    assert all(np.abs(p.data).max() <= 0.04 for p in lstm.parameters())
    names = [n for n, _ in lstm.named_parameters()]
    assert names == [f"{w}_l{k}" for k in range(2) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]


def test_bad_inputs_name_the_problem(rng):
    lstm = nn.LSTM(3, 4, num_layers=2)
    with pytest.raises(ValueError, match=r"\[T, B, I\] or unbatched \[T, I\] with I=3"):
        lstm(minidl.tensor(np.zeros((5, 2, 7), np.float32)))
    with pytest.raises(ValueError, match="initial h must have shape"):
        lstm(minidl.tensor(np.zeros((5, 2, 3), np.float32)), (np.zeros((1, 2, 4)), np.zeros((2, 2, 4))))
    with pytest.raises(TypeError, match="pair"):
        lstm(minidl.tensor(np.zeros((5, 2, 3), np.float32)), np.zeros((2, 2, 4)))
    with pytest.raises(TypeError, match="one floating dtype"):
        LSTMFunction.apply(np.zeros((2, 1, 3)), *(np.zeros(s, np.float32) for s in [(1, 4), (1, 4), (16, 3), (16, 4)]))
    with pytest.raises(ValueError, match="weight_hh must be"):
        LSTMFunction.apply(*(np.zeros(s) for s in [(2, 1, 3), (1, 4), (1, 4), (16, 3), (16, 3)]))
    with pytest.raises(ValueError, match="input must be"):
        nn.LSTMCell(3, 4)(minidl.tensor(np.zeros((2, 5), np.float32)))
    with pytest.raises(ValueError, match="dropout"):
        nn.LSTM(3, 4, dropout=1.0)
    with pytest.raises(NotImplementedError, match="not supported: proj_size=2"):
        nn.LSTM(3, 4, proj_size=2)
    with pytest.raises(ValueError, match=r"initial h must have shape \(4, 2, 4\)"):  # [L*D, B, H]
        nn.LSTM(3, 4, num_layers=2, bidirectional=True)(np.zeros((5, 2, 3)), (np.zeros((2, 2, 4)),) * 2)
