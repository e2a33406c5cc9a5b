"""Linear, Embedding, Dropout, activations, containers, init and manual_seed: gradchecks and behaviour."""

import math

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn import init


def _t(rng, *shape):
    return minidl.tensor(rng.standard_normal(shape), requires_grad=True)


# ---------------------------------------------------------------- Linear
@pytest.mark.parametrize("x_shape", [(4, 3), (2, 3, 3), (3,)])
def test_linear_gradcheck(rng, x_shape):
    x, w, b = _t(rng, *x_shape), _t(rng, 5, 3), _t(rng, 5)
    assert minidl.gradcheck(F.linear, [x, w, b])
    assert minidl.gradcheck(lambda x, w: F.linear(x, w), [x, w])


def test_linear_module_matches_formula(rng):
    lin = nn.Linear(3, 2)
    assert lin.weight.shape == (2, 3) and lin.bias.shape == (2,)
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"]
    x = rng.standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(lin(minidl.tensor(x)).data, x @ lin.weight.data.T + lin.bias.data, rtol=1e-6)
    assert nn.Linear(3, 2, bias=False).bias is None
    assert [n for n, _ in nn.Linear(3, 2, bias=False).named_parameters()] == ["weight"]


def test_linear_errors():
    lin = nn.Linear(3, 2)
    with pytest.raises(ValueError, match="in_features=3"):
        lin(minidl.zeros(4, 5))
    with pytest.raises(ValueError, match="features must be >= 1"):
        nn.Linear(0, 2)


# ---------------------------------------------------------------- init
def test_default_init_bounds_and_seed():
    minidl.manual_seed(123)
    a = nn.Linear(50, 40)
    minidl.manual_seed(123)
    b = nn.Linear(50, 40)
    np.testing.assert_array_equal(a.weight.data, b.weight.data)  # manual_seed makes init reproducible
    bound = 1 / math.sqrt(50)  # kaiming_uniform(a=sqrt(5)) = U(+-1/sqrt(fan_in))
    assert np.abs(a.weight.data).max() <= bound and np.abs(a.weight.data).max() > 0.9 * bound
    assert np.abs(a.bias.data).max() <= bound
    conv = nn.Conv2d(4, 6, 3)
    assert np.abs(conv.weight.data).max() <= 1 / math.sqrt(4 * 9)


def test_init_functions(rng):
    p = nn.Parameter(np.zeros((300, 200)))
    init.uniform_(p, -0.1, 0.1, rng=rng)  # Zaremba's init
    assert -0.1 <= p.data.min() < -0.09 and 0.09 < p.data.max() <= 0.1
    init.kaiming_normal_(p, mode="fan_out", nonlinearity="relu", rng=rng)
    assert p.data.std() == pytest.approx(math.sqrt(2 / 300), rel=0.05)
    assert init.calculate_fan_in_and_fan_out((8, 4, 3, 3)) == (36, 72)
    with pytest.raises(ValueError, match="at least 2 dimensions"):
        init.calculate_fan_in_and_fan_out((5,))
    with pytest.raises(ValueError, match="seed"):
        minidl.manual_seed(-1)


# ---------------------------------------------------------------- Embedding
def test_embedding_gradcheck_repeated_indices(rng):
    idx = np.array([[0, 2, 2], [4, 0, 2]])
    w = _t(rng, 6, 3)
    assert minidl.gradcheck(lambda w: F.embedding(idx, w), [w])


def test_embedding_gradient_is_sparse_scatter(rng):
    emb = nn.Embedding(6, 3)
    idx = np.array([1, 3, 1, 1])
    out = emb(idx)
    np.testing.assert_array_equal(out.data, emb.weight.data[idx])
    g = rng.standard_normal((4, 3)).astype(np.float32)
    out.backward(g)
    expect = np.zeros((6, 3), np.float32)
    expect[1] = g[0] + g[2] + g[3]
    expect[3] = g[1]
    np.testing.assert_allclose(emb.weight.grad, expect, rtol=1e-6)


def test_embedding_padding_idx(rng):
    emb = nn.Embedding(5, 2, padding_idx=0)
    np.testing.assert_array_equal(emb.weight.data[0], 0)
    emb(np.array([0, 1, 0])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad[0], 0)
    np.testing.assert_array_equal(emb.weight.grad[1], 1)


def test_embedding_errors():
    emb = nn.Embedding(5, 2)
    with pytest.raises(IndexError, match=r"\[0, 5\)"):
        emb(np.array([1, 5]))
    with pytest.raises(TypeError, match="integers"):
        emb(np.array([1.0]))


# ---------------------------------------------------------------- Dropout
def test_dropout_gradcheck_fixed_mask(rng):
    x = _t(rng, 4, 5)
    assert minidl.gradcheck(lambda x: F.dropout(x, 0.3, rng=np.random.default_rng(7)), [x])


def test_dropout_train_eval_and_seed():
    x = minidl.ones(2000, 50)
    d = nn.Dropout(0.25)
    minidl.manual_seed(5)
    y1 = d(x).data
    minidl.manual_seed(5)
    y2 = d(x).data
    np.testing.assert_array_equal(y1, y2)
    assert set(np.unique(y1)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((y1 == 0).mean() - 0.25) < 0.01
    assert abs(y1.mean() - 1.0) < 0.02  # inverted dropout keeps the mean
    d.eval()
    assert d(x) is x
    assert np.all(F.dropout(x, 1.0).data == 0)
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        nn.Dropout(1.5)


# ---------------------------------------------------------------- activations and containers
def test_relu_and_sequential(rng):
    net = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 3), nn.Tanh())
    assert [n for n, _ in net.named_parameters()] == ["0.weight", "0.bias", "2.weight", "2.bias"]
    assert len(net) == 4 and isinstance(net[1], nn.ReLU) and isinstance(net[-1], nn.Tanh)
    assert len(net[1:3]) == 2
    with pytest.raises(IndexError, match="out of range"):
        net[4]
    x = rng.standard_normal((5, 4)).astype(np.float32)
    h = np.maximum(x @ net[0].weight.data.T + net[0].bias.data, 0)
    np.testing.assert_allclose(
        net(minidl.tensor(x)).data, np.tanh(h @ net[2].weight.data.T + net[2].bias.data), rtol=1e-5, atol=1e-6
    )
    with pytest.raises(TypeError, match="Module"):
        nn.Sequential(lambda x: x)


def test_sequential_gradcheck(rng):
    minidl.set_default_dtype(np.float64)
    net = nn.Sequential(nn.Linear(3, 4), nn.Sigmoid(), nn.Flatten(0), nn.Identity())
    w0, b0 = net[0].weight, net[0].bias

    def fn(x, w, b):
        net[0].weight, net[0].bias = w, b
        return net(x)

    assert minidl.gradcheck(fn, [_t(rng, 2, 3), w0, b0])


def test_flatten(rng):
    x = minidl.tensor(rng.standard_normal((2, 3, 4, 5)), requires_grad=True)
    assert nn.Flatten()(x).shape == (2, 60)
    assert nn.Flatten(0, 1)(x).shape == (6, 4, 5)
    assert F.flatten(x, 2).shape == (2, 3, 20)
    with pytest.raises(ValueError, match="bad dims"):
        F.flatten(x, 3, 1)
    assert minidl.gradcheck(lambda x: nn.Flatten()(x) * 2.0, [x])


def test_load_state_dict_error_is_plain_text_and_a_key_and_value_error():
    from minidl.nn import StateDictError

    layer = nn.Linear(3, 2)
    with pytest.raises(StateDictError) as info:
        layer.load_state_dict({"weight": np.zeros((5, 3), np.float32)})
    message = str(info.value)
    assert message.startswith("load_state_dict for Linear") and "shape mismatch for weight" in message
    assert "missing keys: ['bias']" in message
    assert isinstance(info.value, KeyError) and isinstance(info.value, ValueError)
