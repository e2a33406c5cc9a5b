"""nn.LSTM as a list of LSTMLayer modules: the same parameters, names and results, cut layer by layer."""

import copy

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.random import manual_seed


def test_layers_share_the_lstms_parameters_under_its_names():
    lstm = nn.LSTM(5, 4, num_layers=3)
    assert [type(m).__name__ for m in lstm.layers] == ["LSTMLayer"] * 3
    names = [n for n, _ in lstm.named_parameters()]
    assert names == [f"{w}_l{k}" for k in range(3) for w in ("weight_ih", "weight_hh", "bias_ih", "bias_hh")]
    params = dict(lstm.named_parameters())
    for k, layer in enumerate(lstm.layers):
        for name, p in layer.named_parameters():
            assert name.endswith(f"_l{k}") and params[name] is p  # the very same objects
    assert sum(len(list(layer.parameters())) for layer in lstm.layers) == len(params)
    assert list(lstm.state_dict()) == names  # no "layers." entries: PyTorch's state_dict keys


def test_load_state_dict_reaches_the_layers_and_deepcopy_keeps_them_shared(rng):
    lstm = nn.LSTM(3, 2, num_layers=2)
    state = {k: rng.standard_normal(v.shape) for k, v in lstm.state_dict().items()}
    lstm.load_state_dict(state, cast=True)  # float64 draws into the float32 model: asked for
    np.testing.assert_allclose(lstm.layers[1].weight_hh_l1.data, state["weight_hh_l1"], rtol=1e-6)
    twin = copy.deepcopy(lstm)
    assert twin.layers[0].weight_ih_l0 is twin.weight_ih_l0 and twin.weight_ih_l0 is not lstm.weight_ih_l0


@pytest.mark.parametrize("dropout, bidirectional", [(0.0, False), (0.4, False), (0.4, True)])
def test_layers_run_one_after_another_equal_the_stack(rng, dropout, bidirectional):
    """Cutting the LSTM between layers (as layer-wise and pipeline parallelism do) changes nothing:
    outputs, final states and every gradient agree, dropout masks included (same seed)."""
    minidl.set_default_dtype(np.float64)
    T, B, I, H, L = 5, 3, 4, 6, 3
    D = 2 if bidirectional else 1
    lstm = nn.LSTM(I, H, num_layers=L, dropout=dropout, bidirectional=bidirectional)
    x = minidl.tensor(rng.standard_normal((T, B, I)), requires_grad=True)
    h0, c0 = (minidl.tensor(rng.standard_normal((L * D, B, H))) for _ in range(2))
    r = rng.standard_normal((T, B, D * H))

    manual_seed(1)
    out, (h, c) = lstm(x, (h0, c0))
    ((out * r).sum() + h.sum() + (c * c).sum()).backward()
    whole = [out.data, h.data, c.data, x.grad] + [p.grad for p in lstm.parameters()]

    lstm.zero_grad()
    x.grad = None
    manual_seed(1)
    y, hs, cs = x, [], []
    for k, layer in enumerate(lstm.layers):
        layer.train()
        layer.dropout = dropout if k > 0 else 0.0
        y, (hk, ck) = layer(y, (h0[k * D : (k + 1) * D], c0[k * D : (k + 1) * D]))
        hs.append(hk)
        cs.append(ck)
    h_cut, c_cut = minidl.ops.Concatenate.apply(*hs, axis=0), minidl.ops.Concatenate.apply(*cs, axis=0)
    ((y * r).sum() + h_cut.sum() + (c_cut * c_cut).sum()).backward()
    cut = [y.data, h_cut.data, c_cut.data, x.grad] + [p.grad for p in lstm.parameters()]
    for a, b in zip(whole, cut):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_eval_mode_of_the_lstm_reaches_its_layers(rng, float64):
    lstm = nn.LSTM(3, 4, num_layers=2, dropout=0.5)
    x = minidl.tensor(rng.standard_normal((4, 2, 3)))
    lstm.eval()
    a, _ = lstm(x)
    assert not any(layer.training for layer in lstm.layers)
    b, _ = lstm(x)
    np.testing.assert_array_equal(a.data, b.data)


def test_layer_defaults_and_bad_inputs(rng, float64):
    layer = nn.LSTMLayer(3, 4, index=2)
    assert [n for n, _ in layer.named_parameters()] == ["weight_ih_l2", "weight_hh_l2", "bias_ih_l2", "bias_hh_l2"]
    out, (h, c) = layer(minidl.tensor(rng.standard_normal((2, 5, 3))))
    assert out.shape == (2, 5, 4) and h.shape == c.shape == (1, 5, 4)
    assert [n for n, _ in nn.LSTMLayer(3, 4, bias=False).named_parameters()] == ["weight_ih_l0", "weight_hh_l0"]
    with pytest.raises(ValueError, match=r"LSTMLayer: input must be \[T, B, I\] with I=3"):
        layer(minidl.tensor(np.zeros((2, 5, 4))))
    with pytest.raises(ValueError, match="initial h must have shape"):
        layer(minidl.tensor(np.zeros((2, 5, 3))), (np.zeros((2, 5, 4)), np.zeros((1, 5, 4))))
    with pytest.raises(ValueError, match="dropout"):
        nn.LSTMLayer(3, 4, dropout=-0.1)
