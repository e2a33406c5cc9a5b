"""Tensor convenience methods and module-level functions: names, conventions, non-differentiable helpers."""

import numpy as np
import pytest

import minidl


@pytest.fixture
def x():
    return minidl.tensor(np.array([[3.0, -1.0, 2.0], [0.5, 4.0, -2.0]]), requires_grad=True)


def test_argmax_argmin_and_comparisons_are_constants(x):
    np.testing.assert_array_equal(x.argmax(axis=1).data, [0, 1])
    np.testing.assert_array_equal(x.argmin(axis=0).data, [1, 0, 1])
    assert x.argmax().item() == 4
    for mask in (x > 0, x >= 0.5, x < 0, x <= -1.0, x > minidl.tensor(np.zeros(3))):
        assert mask.dtype == bool and not mask.requires_grad
    np.testing.assert_array_equal((x > 0).data, x.data > 0)


def test_abs_operator_and_method(x):
    np.testing.assert_array_equal(abs(x).data, np.abs(x.data))
    np.testing.assert_array_equal(minidl.abs(x).data, x.abs().data)


def test_max_min_return_values_not_indices(x):
    assert x.max().item() == 4.0 and x.min().item() == -2.0
    assert x.max(axis=0, keepdims=True).shape == (1, 3)


def test_split_uses_numpy_semantics(x):
    parts = x.split(3, axis=1)  # three parts (NumPy), not parts of size 3 (PyTorch)
    assert [p.shape for p in parts] == [(2, 1)] * 3
    parts = minidl.split(x, [1], axis=1)  # cut indices
    assert [p.shape for p in parts] == [(2, 1), (2, 2)]
    (parts[1] * 2.0).sum().backward()
    np.testing.assert_array_equal(x.grad, [[0, 2, 2], [0, 2, 2]])


def test_squeeze_unsqueeze_flatten_shapes():
    t = minidl.tensor(np.ones((1, 2, 1, 3)))
    assert t.squeeze().shape == (2, 3)
    assert t.squeeze(0).shape == (2, 1, 3)
    assert t.squeeze((0, 2)).shape == (2, 3)
    assert t.unsqueeze(-1).shape == (1, 2, 1, 3, 1)
    assert t.unsqueeze(0).shape == (1, 1, 2, 1, 3)
    assert t.flatten().shape == (6,)
    assert t.flatten(1, 2).shape == (1, 2, 3)
    assert minidl.tensor(5.0).flatten().shape == (1,)
    with pytest.raises(ValueError, match="unsqueeze: axis 6 is out of range"):
        t.unsqueeze(6)
    with pytest.raises(ValueError, match="flatten: start_axis 2 comes after end_axis 1"):
        t.flatten(2, 1)


def test_module_functions_accept_arrays_and_scalars():
    a = minidl.tensor(np.ones(2, np.float32), requires_grad=True)
    m = minidl.maximum(a, 2.0)
    assert m.dtype == np.float32  # the Python scalar takes the tensor's dtype
    np.testing.assert_array_equal(m.data, [2.0, 2.0])
    s = minidl.stack([a, np.zeros(2, np.float32)], axis=1)
    assert s.shape == (2, 2) and s.requires_grad
    c = minidl.cat([np.ones((1, 2)), np.zeros((2, 2))])
    assert c.shape == (3, 2) and not c.requires_grad
    assert minidl.softmax(np.zeros(4)).data.sum() == pytest.approx(1.0)
    assert minidl.logsumexp(np.zeros((2, 2))).item() == pytest.approx(np.log(4))  # axis=None: all elements
    assert minidl.log_softmax(np.zeros((2, 2)), axis=0).shape == (2, 2)


def test_mean_keeps_dtype_and_keepdims():
    t = minidl.tensor(np.ones((2, 3), np.float32), requires_grad=True)
    m = t.mean(axis=1, keepdims=True)
    assert m.dtype == np.float32 and m.shape == (2, 1)
    m.sum().backward()
    np.testing.assert_allclose(t.grad, np.full((2, 3), 1 / 3))
    assert t.grad.dtype == np.float32
