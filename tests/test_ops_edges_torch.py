"""The op surface at its edges against PyTorch (issue 27): bool in var/std, a negative padding_idx, std where
all values are equal or near 1e20 in float32, maximum/minimum against NaN, softmax and logsumexp over an empty
axis, logsumexp of bool, relu6/tan/softsign/celu, and conv2d with 4-tuple or negative padding (skipped without
torch, except the gradchecks)."""

import numpy as np
import pytest

import minidl
import minidl.nn as nn
import minidl.nn.functional as F
from minidl.gradcheck import gradcheck

NEW_OPS = {
    "relu6": (F.relu6, "relu6"),
    "tan": (minidl.tan, "tan"),
    "softsign": (F.softsign, "softsign"),
    "celu": (lambda x: F.celu(x, 0.7), "celu"),
}
# both sides of every kink (0 and 6 for relu6), and the kinks themselves
POINTS = np.array([-25.0, -3.0, -1.0, -1e-3, 0.0, 1e-3, 0.5, 1.0, 5.999, 6.0, 6.001, 25.0])


def _torch():
    return pytest.importorskip("torch")


@pytest.mark.parametrize("name", NEW_OPS)
def test_new_activations_gradcheck_in_float64(name):
    fn, _ = NEW_OPS[name]
    x = np.random.default_rng(0).uniform(-1.4, 1.4, (3, 5)) * (5 if name == "relu6" else 1)
    assert gradcheck(fn, [x])


@pytest.mark.parametrize("name", NEW_OPS)
def test_new_activations_match_torch_at_kinks(name):
    torch = _torch()
    fn, torch_name = NEW_OPS[name]
    tfn = {
        "relu6": torch.nn.functional.relu6,
        "tan": torch.tan,
        "softsign": torch.nn.functional.softsign,
        "celu": lambda x: torch.nn.functional.celu(x, 0.7),
    }[torch_name]
    x = POINTS.copy() if name != "tan" else POINTS.clip(-1.5, 1.5)
    ours, theirs = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    out, ref = fn(ours), tfn(theirs)
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-12, atol=1e-14)
    out.sum().backward()
    ref.sum().backward()
    # PyTorch's celu backward takes 1/alpha in float32 (1.0000000170 at x = 0): the exact value is 1
    rtol = 1e-7 if name == "celu" else 1e-12
    np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=rtol, atol=1e-14)


def test_new_activation_modules():
    x = minidl.tensor(POINTS)
    for module, fn in ((nn.ReLU6(), F.relu6), (nn.Softsign(), F.softsign), (nn.CELU(0.5), lambda t: F.celu(t, 0.5))):
        np.testing.assert_array_equal(module(x).data, fn(x).data)
    with pytest.raises(ValueError, match="alpha must not be 0"):
        nn.CELU(0.0)


@pytest.mark.parametrize("op", ["var", "std"])
def test_var_std_refuse_bool_as_torch(op):
    torch = _torch()
    with pytest.raises(RuntimeError, match="only support floating point"):
        getattr(torch.tensor([True, False, True]), op)()
    with pytest.raises(TypeError, match=f"{op}: only floating-point tensors are supported, got bool"):
        getattr(minidl.tensor([True, False, True]), op)()


def test_embedding_negative_padding_idx_gets_no_gradient():
    torch = _torch()
    w = np.random.default_rng(0).standard_normal((5, 3))
    idx = np.array([0, 4, 2, 4])
    ours, theirs = minidl.tensor(w, requires_grad=True), torch.tensor(w, requires_grad=True)
    F.embedding(idx, ours, padding_idx=-1).sum().backward()
    torch.nn.functional.embedding(torch.tensor(idx), theirs, padding_idx=-1).sum().backward()
    np.testing.assert_array_equal(ours.grad, theirs.grad.numpy())
    assert not ours.grad[4].any()
    with pytest.raises(ValueError, match="padding_idx -6 out of range for 5 rows"):
        F.embedding(idx, ours, padding_idx=-6)


def test_std_gradient_where_all_values_are_equal_is_zero():
    torch = _torch()
    x = np.array([[3.0, 3.0, 3.0], [1.0, 2.0, 4.0]])
    ours, theirs = minidl.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ours.std(axis=1).sum().backward()
    theirs.std(dim=1).sum().backward()
    np.testing.assert_allclose(ours.grad, theirs.grad.numpy(), rtol=1e-12)
    assert not np.isnan(ours.grad).any()


def test_std_of_float32_near_1e20_does_not_overflow():
    torch = _torch()
    x = np.array([1e20, -1e20, 1e20, 3e19], np.float32)
    ours, ref = minidl.tensor(x).std(), torch.tensor(x).std()
    assert np.isfinite(ours.item()) and ours.dtype == np.float32
    np.testing.assert_allclose(ours.item(), ref.item(), rtol=1e-6)
    np.testing.assert_allclose(minidl.tensor(x).std(correction=0).item(), np.std(x.astype(np.float64)), rtol=1e-6)


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_maximum_minimum_with_nan_give_both_sides_the_gradient(op):
    torch = _torch()
    a, b = np.array([np.nan, 1.0, 2.0, 5.0]), np.array([1.0, np.nan, 2.0, 0.0])
    ma, mb = minidl.tensor(a, requires_grad=True), minidl.tensor(b, requires_grad=True)
    ta, tb = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    getattr(minidl, op)(ma, mb).sum().backward()
    getattr(torch, op)(ta, tb).sum().backward()
    np.testing.assert_array_equal(ma.grad, ta.grad.numpy())
    np.testing.assert_array_equal(mb.grad, tb.grad.numpy())


@pytest.mark.parametrize("shape,axis", [((3, 0), -1), ((3, 0), 1), ((0, 4), 0), ((2, 0, 3), 1)])
def test_softmax_family_over_an_empty_axis(shape, axis):
    torch = _torch()
    x = np.zeros(shape)
    for name in ("softmax", "log_softmax"):
        ours = minidl.tensor(x, requires_grad=True)
        out = getattr(F, name)(ours, axis)
        assert out.shape == tuple(getattr(torch, name)(torch.tensor(x), axis).shape)
        out.sum().backward()
        assert ours.grad.shape == shape
    ours = minidl.tensor(x, requires_grad=True)
    for keepdims in (False, True):
        out = minidl.logsumexp(ours, axis, keepdims=keepdims)
        ref = torch.logsumexp(torch.tensor(x), axis, keepdim=keepdims).numpy()
        assert out.shape == ref.shape
        np.testing.assert_array_equal(out.data, ref)  # -inf, the log of an empty sum
    out.sum().backward()
    assert ours.grad.shape == shape


def test_logsumexp_of_bool_and_int_as_torch():
    torch = _torch()
    for values in ([True, False, True], [1, 2, 3]):
        ours, ref = minidl.logsumexp(minidl.tensor(values), 0), torch.logsumexp(torch.tensor(values), 0)
        assert ours.dtype == np.float32 and str(ref.dtype) == "torch.float32"
        np.testing.assert_allclose(ours.item(), ref.item(), rtol=1e-6)


@pytest.mark.parametrize("pad", [(1, 2, 0, 3), (2, 0, 1, 1), (-1, 0, 2, -2), (-1, -1, -1, -1), (0, -2, 1, 0)], ids=str)
@pytest.mark.parametrize("method", ["auto", "im2col", "gemm"])
def test_conv2d_four_tuple_and_negative_padding_as_torch_pad_then_conv(pad, method):
    torch = _torch()
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 3, 7, 6)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)
    ours = [minidl.tensor(a, requires_grad=True) for a in (x, w, b)]
    theirs = [torch.tensor(a, requires_grad=True) for a in (x, w, b)]
    out = F.conv2d(*ours, stride=(1, 2), padding=pad, method=method)
    ref = torch.nn.functional.conv2d(torch.nn.functional.pad(theirs[0], pad), theirs[1], theirs[2], stride=(1, 2))
    np.testing.assert_allclose(out.data, ref.detach().numpy(), rtol=1e-10, atol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(g)
    ref.backward(torch.tensor(g))
    for a, t in zip(ours, theirs):
        np.testing.assert_allclose(a.grad, t.grad.numpy(), rtol=1e-10, atol=1e-12)


def test_conv2d_negative_symmetric_padding_and_the_module():
    torch = _torch()
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 6, 6))
    conv = nn.Conv2d(2, 3, 3, padding=(-1, 1, 0, 2), dtype=np.float64)
    ref = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.tensor(x), (-1, 1, 0, 2)),
        torch.tensor(conv.weight.data),
        torch.tensor(conv.bias.data),
    )
    np.testing.assert_allclose(conv(minidl.tensor(x)).data, ref.numpy(), rtol=1e-10, atol=1e-12)
    out = F.conv2d(minidl.tensor(x), minidl.tensor(conv.weight.data), padding=-1)
    ref = torch.nn.functional.conv2d(
        torch.nn.functional.pad(torch.tensor(x), (-1,) * 4), torch.tensor(conv.weight.data)
    )
    np.testing.assert_allclose(out.data, ref.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="crops more than the input's size"):
        F.conv2d(minidl.tensor(x), minidl.tensor(conv.weight.data), padding=(-4, -4, 0, 0))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("op", ["std", "var"])
def test_std_and_var_of_a_0d_tensor_are_nan_with_a_warning_as_torch(op, axis, dtype):
    """One value has no spread to estimate (n - correction = 0): NaN and a warning, gradient NaN, as PyTorch
    (std raised TypeError: 'numpy.float32' object does not support item assignment)."""
    x = minidl.tensor(np.array(2.0, dtype), requires_grad=True)
    with pytest.warns(RuntimeWarning, match="degrees of freedom is <= 0"):
        y = getattr(x, op)() if axis is None else getattr(x, op)(axis)
    assert y.shape == () and y.dtype == dtype and np.isnan(y.item())
    y.backward()
    assert x.grad.shape == () and x.grad.dtype == dtype and np.isnan(x.grad)
    torch = _torch()
    t = torch.tensor(2.0, dtype=getattr(torch, np.dtype(dtype).name), requires_grad=True)
    with pytest.warns(UserWarning, match="degrees of freedom is <= 0"):
        ref = getattr(t, op)() if axis is None else getattr(t, op)(axis)
    ref.backward()
    assert np.isnan(ref.item()) and np.isnan(t.grad.item())


@pytest.mark.parametrize("axis", [None, 0, -1])
@pytest.mark.parametrize("op", ["std", "var"])
def test_std_and_var_of_a_0d_tensor_gradcheck_where_defined(op, axis):
    """With correction 0 a 0-d tensor's spread is defined (0); its gradient is checked in float64."""
    x = minidl.tensor(np.array(2.5), requires_grad=True)
    fn = (lambda t: getattr(t, op)(correction=0)) if axis is None else (lambda t: getattr(t, op)(axis, correction=0))
    assert fn(x).item() == 0.0
    assert gradcheck(fn, [x])
