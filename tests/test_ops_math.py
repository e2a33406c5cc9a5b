"""The math ops a PyTorch user reaches for: unary math, activations, clamp with tensor bounds, flip, cumsum,
var/std, tril/triu, comparisons and factories. Forward equals a NumPy reference and gradcheck passes (float64,
every memory layout); PyTorch parity is in test_ops_math_torch.py."""

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ops_strategies import arrays, axis_args, broadcast_pair, check_op

import minidl
import minidl.nn as nn
import minidl.nn.functional as F


def _sigmoid(x):
    return 1 / (1 + np.exp(-x))


def _softplus(x, beta=1.0):
    return np.log1p(np.exp(beta * x)) / beta


_erf = np.vectorize(math.erf, otypes=[float])

UNARY = {
    "sqrt": (lambda x: x.sqrt(), np.sqrt, {"positive": True}),
    "sin": (lambda x: x.sin(), np.sin, {}),
    "cos": (minidl.cos, np.cos, {}),
    "log2": (lambda x: x.log2(), np.log2, {"positive": True}),
    "sign": (lambda x: x.sign() * x, lambda x: np.sign(x) * x, {}),  # sign's zero gradient, times x: |x|
    "floor": (lambda x: x.floor() + x, lambda x: np.floor(x) + x, {}),
    "ceil": (lambda x: minidl.ceil(x) * x, lambda x: np.ceil(x) * x, {}),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x), {}),
    "elu": (lambda x: F.elu(x, 1.5), lambda x: np.where(x > 0, x, 1.5 * (np.exp(x) - 1)), {}),
    "gelu": (F.gelu, lambda x: x * 0.5 * (1 + _erf(x / np.sqrt(2))), {}),
    "gelu_tanh": (
        lambda x: F.gelu(x, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x**3))),
        {},
    ),
    "softplus": (F.softplus, _softplus, {}),
    "softplus_beta": (lambda x: F.softplus(x, beta=2.0), lambda x: _softplus(x, 2.0), {}),
    "silu": (F.silu, lambda x: x * _sigmoid(x), {}),
    "hardswish": (lambda x: F.hardswish(x * 3), lambda x: 3 * x * np.clip(3 * x + 3, 0, 6) / 6, {}),
    "mish": (F.mish, lambda x: x * np.tanh(np.log1p(np.exp(x))), {}),
}


@pytest.mark.parametrize("name", UNARY)
@settings(max_examples=25)
@given(data=st.data())
def test_unary(name, data):
    fn, ref, kw = UNARY[name]
    check_op(fn, ref, [data.draw(arrays(**kw))])


@settings(max_examples=25)
@given(data=st.data())
def test_clamp_with_tensor_bounds(data):
    x, lo = data.draw(broadcast_pair())
    lo = 0.5 * lo - 0.25  # the strategy may draw x and lo from one seed: keep them apart (a tie is a kink)
    hi = lo + 1.0 + np.abs(data.draw(arrays(shape=lo.shape)))  # hi > lo
    check_op(lambda x, lo, hi: x.clamp(lo, hi), lambda x, lo, hi: np.clip(x, lo, hi), [x, lo, hi])
    check_op(lambda x, lo: minidl.clamp(x, lo), lambda x, lo: np.maximum(x, lo), [x, lo])


def test_clamp_tensor_bound_gradients_follow_pytorch_rule():
    x = minidl.tensor([-2.0, 0.0, 2.0, 1.0], requires_grad=True, dtype=np.float64)
    lo = minidl.tensor([-1.0, 0.0, -1.0, 3.0], requires_grad=True, dtype=np.float64)
    hi = minidl.tensor([1.0, 1.0, 1.0, 2.0], requires_grad=True, dtype=np.float64)  # last: hi < lo
    y = x.clamp(lo, hi)
    np.testing.assert_array_equal(y.data, [-1.0, 0.0, 1.0, 2.0])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 1, 0, 0])  # inside, bounds included
    np.testing.assert_array_equal(lo.grad, [1, 0, 0, 0])  # x < lo (and lo < hi)
    np.testing.assert_array_equal(hi.grad, [0, 0, 1, 1])  # x > hi, or hi < lo


@settings(max_examples=25)
@given(data=st.data())
def test_flip(data):
    x = data.draw(arrays())
    axis = data.draw(axis_args(x.ndim))
    check_op(lambda x: x.flip(axis), lambda x: np.flip(x, axis), [x])


@settings(max_examples=25)
@given(data=st.data())
def test_cumsum(data):
    x = data.draw(arrays(min_dims=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    check_op(lambda x: minidl.cumsum(x, axis), lambda x: np.cumsum(x, axis), [x])


@settings(max_examples=25)
@given(data=st.data(), correction=st.sampled_from([0, 1, 2]), keepdims=st.booleans())
def test_var_std(data, correction, keepdims):
    x = data.draw(arrays(min_dims=1, min_side=3))  # n > correction: finite values and gradients
    axis = data.draw(axis_args(x.ndim))
    axes = tuple(range(x.ndim)) if axis is None else axis
    check_op(
        lambda x: x.var(axis, correction=correction, keepdims=keepdims),
        lambda x: np.var(x, axis=axes, ddof=correction, keepdims=keepdims),
        [x],
    )
    check_op(
        lambda x: minidl.std(x, axis, correction=correction, keepdims=keepdims),
        lambda x: np.std(x, axis=axes, ddof=correction, keepdims=keepdims),
        [x],
        atol=1e-5,
    )


def test_var_defaults_and_large_mean():
    x = np.array([1e6 + 0.01, 1e6 - 0.01, 1e6], np.float64)
    assert minidl.var(x).item() == pytest.approx(1e-4, rel=1e-9)  # two passes: no cancellation
    assert minidl.var(x, unbiased=False).item() == pytest.approx(np.var(x), rel=1e-9)
    t = minidl.tensor(np.ones(1), requires_grad=True, dtype=np.float64)
    with np.errstate(all="ignore"):
        assert np.isnan(t.var().item())  # n - correction = 0: NaN, as PyTorch
    with pytest.raises(ValueError, match="unbiased or correction, not both"):
        minidl.var(x, unbiased=True, correction=1)


@settings(max_examples=25)
@given(data=st.data(), k=st.integers(-2, 2), upper=st.booleans())
def test_tril_triu(data, k, upper):
    x = data.draw(arrays(min_dims=2))
    fn, ref = (minidl.triu, np.triu) if upper else (minidl.tril, np.tril)
    check_op(lambda x: fn(x, k), lambda x: ref(x, k), [x])
    with pytest.raises(ValueError, match="need at least 2 dimensions"):
        fn(minidl.tensor([1.0, 2.0]))


def test_comparisons_return_boolean_tensors():
    a = minidl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = minidl.tensor([3.0, 2.0, 1.0])
    for got, want in [
        (a == b, [False, True, False]),
        (a != b, [True, False, True]),
        (a < b, [True, False, False]),
        (a <= 2, [True, True, False]),
        (a > b, [False, False, True]),
        (a >= b, [False, True, True]),
        (np.float32(2) == a, [False, True, False]),
    ]:
        assert isinstance(got, minidl.Tensor) and got.dtype == bool and not got.requires_grad
        np.testing.assert_array_equal(got.data, want)
    with pytest.raises(ValueError, match="shapes \\(3,\\) and \\(2,\\) cannot be broadcast"):
        minidl.eq(a, minidl.tensor([1.0, 2.0]))


def test_tensors_stay_hashable_by_identity():
    a, b = minidl.tensor([1.0]), minidl.tensor([1.0])
    assert len({a, b}) == 2 and {a: 1, b: 2}[b] == 2
    assert a in [a] and a in {a}


def test_factories():
    assert minidl.full((2, 3), 1.5).dtype == np.float32 and minidl.full(2, 7).dtype == np.int64
    np.testing.assert_array_equal(minidl.full((2,), True).data, [True, True])
    np.testing.assert_array_equal(minidl.eye(2, 3).data, np.eye(2, 3))
    assert minidl.arange(5).dtype == np.int64 and minidl.arange(0.0, 1.0, 0.25).shape == (4,)
    np.testing.assert_array_equal(minidl.arange(2, 8, 3).data, [2, 5])
    x = minidl.tensor(np.ones((2, 2), np.float64))
    assert minidl.zeros_like(x).dtype == np.float64 and minidl.ones_like(x, dtype=np.float32).dtype == np.float32
    assert minidl.zeros(2, 3).shape == minidl.ones((2, 3)).shape == minidl.randn(2, 3).shape == (2, 3)
    assert minidl.full_like(x, 4.0).data.sum() == 16.0
    assert minidl.zeros(2, requires_grad=True).requires_grad
    with pytest.raises(ValueError, match="step must be nonzero"):
        minidl.arange(0, 3, 0)


def test_activation_modules_match_functions():
    x = minidl.tensor(np.linspace(-4, 4, 17))
    pairs = [
        (nn.LeakyReLU(0.1), F.leaky_relu(x, 0.1)),
        (nn.ELU(0.5), F.elu(x, 0.5)),
        (nn.GELU(), F.gelu(x)),
        (nn.GELU("tanh"), F.gelu(x, "tanh")),
        (nn.Softplus(2.0, 10.0), F.softplus(x, 2.0, 10.0)),
        (nn.SiLU(), F.silu(x)),
        (nn.Hardswish(), F.hardswish(x)),
        (nn.Mish(), F.mish(x)),
        (nn.Tanh(), F.tanh(x)),
        (nn.Sigmoid(), F.sigmoid(x)),
        (nn.ReLU(), F.relu(x)),
    ]
    for module, expected in pairs:
        np.testing.assert_array_equal(module(x).data, expected.data)
    assert "negative_slope=0.1" in repr(nn.LeakyReLU(0.1))


def test_unsupported_options_raise_clear_errors():
    with pytest.raises(ValueError, match="not supported: inplace=True"):
        nn.ReLU(inplace=True)
    with pytest.raises(ValueError, match="approximate must be 'none' or 'tanh'"):
        F.gelu(minidl.tensor([1.0]), approximate="erf")
    with pytest.raises(TypeError, match="cumsum: axis must be one int"):
        minidl.cumsum(minidl.tensor([1.0]), (0,))


def test_softplus_is_linear_above_threshold_and_finite_below():
    x = minidl.tensor(np.array([-800.0, 0.0, 25.0, 800.0]), requires_grad=True)
    y = F.softplus(x)
    assert np.isfinite(y.data).all() and y.data[2] == 25.0 and y.data[3] == 800.0
    y.sum().backward()
    np.testing.assert_allclose(x.grad, [0.0, 0.5, 1.0, 1.0])
