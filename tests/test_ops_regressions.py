"""Regression tests for bugs found against outside test suites (each failed before its fix)."""

import numpy as np
import pytest

import minidl


def test_matmul_of_two_vectors_backward():
    """1-D @ 1-D is a dot product with a 0-d result; its backward used to expand the 0-d gradient (AxisError)."""
    a = minidl.tensor([1.0, 2.0, 3.0], requires_grad=True, dtype=np.float64)
    b = minidl.tensor([4.0, 5.0, 6.0], requires_grad=True, dtype=np.float64)
    y = a @ b
    assert y.shape == () and y.item() == 32.0
    y.backward()
    np.testing.assert_array_equal(a.grad, [4.0, 5.0, 6.0])
    np.testing.assert_array_equal(b.grad, [1.0, 2.0, 3.0])


@pytest.mark.parametrize("shapes", [((3,), (3,)), ((2, 3), (3,)), ((3,), (3, 2)), ((4, 2, 3), (3,)), ((3,), (4, 3, 2))])
def test_matmul_vector_cases_gradcheck(shapes):
    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal(s) for s in shapes)
    assert minidl.gradcheck(lambda a, b: a @ b, [a, b])


def test_pow_zero_exponent_at_zero_has_zero_gradient():
    """d(x^0)/dx = 0 everywhere, also at x = 0 (PyTorch); it used to be 0 * 0^-1 = NaN."""
    x = minidl.tensor([0.0, 2.0, -1.5], requires_grad=True, dtype=np.float64)
    (x**0).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])


def test_pow_tensor_exponent_zero_at_zero_base():
    x = minidl.tensor([0.0, 0.0, 3.0], requires_grad=True, dtype=np.float64)
    y = minidl.tensor([0.0, 2.0, 0.0], requires_grad=True, dtype=np.float64)
    (x**y).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0, 0.0])  # 0 * 0^-1 masked; 2 * 0^1 = 0; 0 * 3^-1 masked
    np.testing.assert_array_equal(y.grad, [0.0, 0.0, np.log(3.0)])  # x^y log x, 0 where x = 0
    assert np.isfinite(x.grad).all() and np.isfinite(y.grad).all()


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_and_log_softmax_of_a_scalar(axis):
    """A 0-d tensor is a distribution over one value: softmax 1, log_softmax 0, gradient 0 (used to raise)."""
    x = minidl.tensor(3.5, requires_grad=True, dtype=np.float64)
    p, lp = minidl.softmax(x, axis=axis), x.log_softmax(axis=axis)
    assert p.shape == () and p.item() == 1.0 and lp.item() == 0.0
    (p + lp).backward()
    assert x.grad == 0.0
    assert minidl.logsumexp(x, axis=axis).item() == 3.5


def test_scalar_axis_out_of_range_is_refused():
    with pytest.raises(ValueError, match="axis 1 is out of range"):
        minidl.softmax(minidl.tensor(1.0), axis=1)


def test_reductions_of_a_scalar_over_axis_zero():
    x = minidl.tensor(2.0, requires_grad=True, dtype=np.float64)
    for y in (x.sum(axis=0), x.mean(axis=-1), x.max(axis=0), x.cumsum(axis=0)):
        assert y.shape == () and y.item() == 2.0
    assert minidl.gradcheck(lambda x: x.sum(axis=0) * x.max(axis=-1) + x.cumsum(0), [np.float64(2.0)])
