"""Parity with PyTorch for the math ops and activations: the same values and the same gradients (float64),
kinks and special points included (skipped without torch)."""

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F

torch = pytest.importorskip("torch")
TF = torch.nn.functional

# values on both sides of every kink, and the kinks themselves (0, +-3 for hardswish, ties for clamp)
POINTS = np.array([-25.0, -4.0, -3.0, -2.5, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 2.5, 3.0, 4.0, 25.0])


def compare(fn, torch_fn, inputs, rtol=1e-10, atol=1e-12):
    """Same forward, and same gradients of sum(out * R) for a random R, w.r.t. every float input."""
    ours = [minidl.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    theirs = [torch.tensor(x, requires_grad=x.dtype.kind == "f") for x in inputs]
    out, ref = fn(*ours), torch_fn(*theirs)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=rtol, atol=atol)
    r = np.random.default_rng(0).standard_normal(out.shape)
    out.backward(r)
    ref.backward(torch.tensor(r))
    for a, b in zip(ours, theirs):
        if a.requires_grad:
            np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=rtol, atol=atol)


ELEMENTWISE = {
    "sqrt": (lambda x: (x * x + 1).sqrt(), lambda x: (x * x + 1).sqrt()),
    "sin": (lambda x: x.sin(), torch.sin),
    "cos": (lambda x: x.cos(), torch.cos),
    "log2": (lambda x: (x * x + 0.1).log2(), lambda x: (x * x + 0.1).log2()),
    "sign": (lambda x: x.sign() * x, lambda x: x.sign() * x),
    "floor": (lambda x: x.floor() * x, lambda x: x.floor() * x),
    "ceil": (lambda x: x.ceil() * x, lambda x: x.ceil() * x),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda x: TF.leaky_relu(x, 0.1)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: TF.elu(x, 0.7)),
    "gelu": (F.gelu, TF.gelu),
    "gelu_tanh": (lambda x: F.gelu(x, approximate="tanh"), lambda x: TF.gelu(x, approximate="tanh")),
    "softplus": (F.softplus, TF.softplus),
    "softplus_beta_threshold": (lambda x: F.softplus(x, 2.0, 5.0), lambda x: TF.softplus(x, 2.0, 5.0)),
    "silu": (F.silu, TF.silu),
    "hardswish": (F.hardswish, TF.hardswish),
    "mish": (F.mish, TF.mish),
    "pow_zero": (lambda x: x**0, lambda x: x**0),
}


@pytest.mark.parametrize("name", ELEMENTWISE)
def test_elementwise_at_kinks_and_beyond(name):
    ours, theirs = ELEMENTWISE[name]
    compare(ours, theirs, [POINTS.copy()], rtol=1e-9)


def test_clamp_with_tensor_bounds_and_ties():
    x = POINTS.copy()
    lo = np.where(np.arange(x.size) % 3 == 0, x, -1.0)  # ties with x on every third element
    hi = np.where(np.arange(x.size) % 4 == 0, x, 2.0)
    hi[5] = -2.0  # one hi below lo: torch puts the whole gradient on hi there
    compare(lambda x, lo, hi: x.clamp(lo, hi), lambda x, lo, hi: torch.clamp(x, lo, hi), [x, lo, hi])
    compare(lambda x, lo: minidl.clamp(x, lo), lambda x, lo: torch.clamp(x, min=lo), [x, lo])


def test_flip_cumsum_tril_triu():
    x = np.random.default_rng(1).standard_normal((3, 4, 5))
    compare(lambda x: x.flip((0, 2)), lambda x: x.flip((0, 2)), [x])
    compare(lambda x: x.cumsum(1) * x.cumsum(-1), lambda x: x.cumsum(1) * x.cumsum(-1), [x])
    compare(lambda x: x.tril(1) + x.triu(-1) * 2, lambda x: x.tril(1) + x.triu(-1) * 2, [x])


@pytest.mark.parametrize("correction", [0, 1, 2])
@pytest.mark.parametrize("axis", [None, 1, (0, 2)])
def test_var_std(axis, correction):
    x = np.random.default_rng(2).standard_normal((3, 4, 5)) + 1e3
    dim = axis if axis is None or isinstance(axis, int) else list(axis)
    compare(
        lambda x: x.var(axis, correction=correction) + x.std(axis, correction=correction, keepdims=True).sum(),
        lambda x: x.var(dim, correction=correction) + x.std(dim, correction=correction, keepdim=True).sum(),
        [x],
        rtol=1e-9,
    )
    compare(lambda x: x.var(axis, unbiased=False), lambda x: x.var(dim, unbiased=False), [x])


def test_comparisons_and_factories():
    a, b = np.array([1.0, 2.0, 3.0]), np.array([3.0, 2.0, 1.0])
    ta, tb = torch.tensor(a), torch.tensor(b)
    ma, mb = minidl.tensor(a), minidl.tensor(b)
    for op in ("__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__"):
        np.testing.assert_array_equal(getattr(ma, op)(mb).data, getattr(ta, op)(tb).numpy())
    np.testing.assert_array_equal(minidl.arange(1, 10, 3).data, torch.arange(1, 10, 3).numpy())
    np.testing.assert_array_equal(minidl.eye(3, 2).data, torch.eye(3, 2).numpy())
    np.testing.assert_array_equal(minidl.full((2, 2), 3.0).data, torch.full((2, 2), 3.0).numpy())
    assert minidl.arange(0.0, 1.0, 0.3).shape == tuple(torch.arange(0.0, 1.0, 0.3).shape)


def test_activation_modules_like_torch_modules():
    x = POINTS.copy()
    modules = [
        (nn.LeakyReLU(0.3), torch.nn.LeakyReLU(0.3)),
        (nn.ELU(2.0), torch.nn.ELU(2.0)),
        (nn.GELU("tanh"), torch.nn.GELU("tanh")),
        (nn.Softplus(0.5, 4.0), torch.nn.Softplus(0.5, 4.0)),
        (nn.SiLU(), torch.nn.SiLU()),
        (nn.Hardswish(), torch.nn.Hardswish()),
        (nn.Mish(), torch.nn.Mish()),
        (nn.Tanh(), torch.nn.Tanh()),
        (nn.Sigmoid(), torch.nn.Sigmoid()),
    ]
    for ours, theirs in modules:
        compare(ours, theirs, [x], rtol=1e-9)


def test_regressions_agree_with_torch():
    a, b = np.array([1.0, -2.0, 0.5]), np.array([0.3, 0.2, -4.0])
    compare(lambda a, b: a @ b, lambda a, b: a @ b, [a, b])
    compare(lambda a, b: a**b, lambda a, b: a**b, [np.array([0.0, 0.0, 2.0]), np.array([0.0, 3.0, 0.0])])
    compare(lambda x: x.softmax(-1) + x.log_softmax(0), lambda x: x.softmax(-1) + x.log_softmax(0), [np.array(1.5)])
