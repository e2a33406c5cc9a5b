"""Elementwise ops: forward equals NumPy, gradcheck passes (broadcasting pairs, size-0/1 axes, strided and
transposed inputs), tie rules, dtype policy and error messages."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ops_strategies import arrays, broadcast_pair, check_op

import minidl

BINARY = {
    "add": (lambda a, b: a + b, np.add, {}),
    "sub": (lambda a, b: a - b, np.subtract, {}),
    "mul": (lambda a, b: a * b, np.multiply, {}),
    "div": (lambda a, b: a / b, np.divide, {"away_from_zero": True}),
    "maximum": (minidl.maximum, np.maximum, {}),
    "minimum": (minidl.minimum, np.minimum, {}),
}


@pytest.mark.parametrize("name", BINARY)
@given(data=st.data())
def test_binary_broadcasting(name, data):
    fn, ref, kw = BINARY[name]
    a, b = data.draw(broadcast_pair(**kw))
    check_op(fn, ref, [a, b])


@given(data=st.data())
def test_pow_broadcasting(data):
    bs = data.draw(broadcast_pair())
    base = 0.5 + np.abs(bs[0])  # a^b and its d/db = a^b log a need a > 0
    check_op(lambda a, b: a**b, np.power, [base, bs[1]])


UNARY = {
    "neg": (lambda x: -x, np.negative, {}),
    "exp": (lambda x: x.exp(), np.exp, {}),
    "log": (lambda x: x.log(), np.log, {"positive": True}),
    "tanh": (lambda x: x.tanh(), np.tanh, {}),
    "sigmoid": (lambda x: x.sigmoid(), lambda x: 1 / (1 + np.exp(-x)), {}),
    "relu": (lambda x: x.relu(), lambda x: np.maximum(x, 0), {}),
    "abs": (lambda x: x.abs(), np.abs, {}),
    "module_abs": (minidl.abs, np.abs, {}),
    "clip": (lambda x: x.clip(-0.5, 0.7), lambda x: np.clip(x, -0.5, 0.7), {}),
    "clip_lo": (lambda x: minidl.clip(x, lo=0.1), lambda x: np.clip(x, 0.1, None), {}),
    "clip_hi": (lambda x: minidl.clip(x, hi=-0.1), lambda x: np.clip(x, None, -0.1), {}),
}


@pytest.mark.parametrize("name", UNARY)
@given(data=st.data())
def test_unary(name, data):
    fn, ref, kw = UNARY[name]
    check_op(fn, ref, [data.draw(arrays(**kw))])


@given(data=st.data())
def test_where_three_way_broadcast(data):
    from hypothesis.extra import numpy as hnp

    shapes = data.draw(hnp.mutually_broadcastable_shapes(num_shapes=3, max_dims=3, max_side=3))
    c_shape, x_shape, y_shape = shapes.input_shapes
    cond = np.random.default_rng(data.draw(st.integers(0, 99))).random(c_shape) > 0.5
    x = data.draw(arrays(shape=x_shape))
    y = data.draw(arrays(shape=y_shape))
    check_op(lambda x, y: minidl.where(cond, x, y), lambda x, y: np.where(cond, x, y), [x, y])


def test_where_accepts_scalars_and_keeps_dtype():
    x = minidl.tensor(np.array([-1.0, 2.0], np.float32), requires_grad=True)
    y = minidl.where(x > 0, x, 0.0)
    assert y.dtype == np.float32
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 1.0])


def test_clip_with_array_bounds_and_gradient_at_bounds():
    x = minidl.tensor(np.array([-2.0, 0.0, 1.0, 3.0]), requires_grad=True)
    y = minidl.clip(x, np.array([-1.0, -1.0, -1.0, -1.0]), 1.0)
    np.testing.assert_array_equal(y.data, [-1, 0, 1, 1])
    y.sum().backward()
    np.testing.assert_array_equal(x.grad, [0, 1, 1, 0])  # bounds included, as torch.clamp


def test_maximum_minimum_ties_split_the_gradient():
    a = minidl.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    b = minidl.tensor(np.array([1.0, 1.0, 4.0]), requires_grad=True)
    minidl.maximum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 1.0, 0.0])
    np.testing.assert_array_equal(b.grad, [0.5, 0.0, 1.0])
    a.grad = b.grad = None
    minidl.minimum(a, b).sum().backward()
    np.testing.assert_array_equal(a.grad, [0.5, 0.0, 1.0])
    np.testing.assert_array_equal(b.grad, [0.5, 1.0, 0.0])


def test_abs_and_relu_gradient_at_zero_is_zero():
    x = minidl.tensor(np.zeros(2), requires_grad=True)
    (x.abs() + x.relu()).sum().backward()
    np.testing.assert_array_equal(x.grad, [0.0, 0.0])


def test_mixed_float_dtypes_promote_and_grads_keep_input_dtype():
    a = minidl.tensor(np.ones(3, np.float32), requires_grad=True)
    b = minidl.tensor(np.ones(3, np.float64), requires_grad=True)
    h = a.exp()  # a float32 non-leaf feeding a float64 op
    y = h * b
    assert y.dtype == np.float64
    y.sum().backward()
    assert a.grad.dtype == np.float32 and b.grad.dtype == np.float64
    np.testing.assert_allclose(a.grad, np.e, rtol=1e-6)


def test_integer_tensors_never_require_grad():
    i = minidl.tensor(np.array([1, 2, 3]))
    x = minidl.tensor(np.ones(3), requires_grad=True)
    assert not (i * 2).requires_grad
    assert (x * i).requires_grad
    assert not (x > 0).requires_grad and (x > 0).dtype == bool
    assert not x.argmax().requires_grad
    assert not x.astype(np.int64).requires_grad
    with pytest.raises(TypeError, match="floating"):
        i.requires_grad_()


@pytest.mark.parametrize("name", ["add", "sub", "mul", "div", "maximum", "minimum"])
def test_binary_shape_error_names_op_and_shapes(name):
    fn = BINARY[name][0]
    with pytest.raises(ValueError, match=rf"{name}: shapes \(2, 3\) and \(4,\) cannot be broadcast"):
        fn(minidl.tensor(np.ones((2, 3))), minidl.tensor(np.ones(4)))


def test_pow_and_where_and_clip_errors():
    with pytest.raises(ValueError, match=r"pow: shapes \(2,\) and \(3,\)"):
        minidl.tensor(np.ones(2)) ** minidl.tensor(np.ones(3))
    with pytest.raises(ValueError, match=r"where: condition \(2,\), x \(3,\) and y \(\)"):
        minidl.where(np.ones(2, bool), minidl.tensor(np.ones(3)), 0.0)
    with pytest.raises(ValueError, match=r"clip: bound of shape \(3,\) does not broadcast to input \(2,\)"):
        minidl.clip(minidl.tensor(np.ones(2)), np.zeros(3), 1.0)
    with pytest.raises(ValueError, match="at least one"):
        minidl.clip(minidl.tensor(np.ones(2)))
