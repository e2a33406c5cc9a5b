"""Reductions sum/mean/max/min/logsumexp with axis (None, int, negative, tuple) and keepdims."""

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ops_strategies import arrays, axis_args, check_op

import minidl


def _logsumexp_reference(x, axis, keepdims):
    m = np.max(x, axis=axis, keepdims=True)
    out = np.log(np.sum(np.exp(x - m), axis=axis, keepdims=True)) + m
    return out if keepdims else np.squeeze(out, axis=axis if axis is not None else tuple(range(x.ndim)))


REDUCTIONS = {
    "sum": (lambda x, **kw: x.sum(**kw), np.sum),
    "mean": (lambda x, **kw: x.mean(**kw), np.mean),
    "max": (lambda x, **kw: x.max(**kw), np.max),
    "min": (lambda x, **kw: x.min(**kw), np.min),
    "logsumexp": (lambda x, **kw: x.logsumexp(**kw), _logsumexp_reference),
}


@pytest.mark.parametrize("name", REDUCTIONS)
@given(data=st.data())
def test_reduction(name, data):
    fn, ref = REDUCTIONS[name]
    # max/min of an empty axis is an error (tested below); sum and mean accept size-0 axes (logsumexp: -inf,
    # tested in test_ops_edges_torch.py).
    min_side = 0 if name in ("sum", "mean") else 1
    x = data.draw(arrays(min_side=min_side))
    axis = data.draw(axis_args(x.ndim))
    keepdims = data.draw(st.booleans())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's "mean of empty slice"
        check_op(lambda t: fn(t, axis=axis, keepdims=keepdims), lambda a: ref(a, axis=axis, keepdims=keepdims), [x])


def test_mean_over_empty_axis_is_nan_like_numpy():
    x = minidl.tensor(np.zeros((0, 3)), requires_grad=True)
    m = x.mean(axis=0)
    assert np.isnan(m.data).all() and m.shape == (3,)
    m.sum().backward()
    assert x.grad.shape == (0, 3)


@pytest.mark.parametrize("op", ["max", "min"])
def test_max_min_ties_split_the_gradient_evenly(op):
    x = minidl.tensor(np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]]) * (1 if op == "max" else -1), requires_grad=True)
    getattr(x, op)(axis=1).sum().backward()
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    x.grad = None
    getattr(x, op)().backward()  # global extremum: the two 3.0s
    np.testing.assert_allclose(x.grad, [[0, 0.5, 0.5], [0, 0, 0]])


def test_reduction_errors():
    x = minidl.tensor(np.ones((2, 0)))
    with pytest.raises(ValueError, match=r"max: cannot reduce a tensor of shape \(2, 0\) over an empty axis"):
        x.max(axis=1)
    with pytest.raises(ValueError, match="axis 2 is out of range for a tensor with 2 dimensions"):
        minidl.tensor(np.ones((2, 3))).sum(axis=2)


def test_logsumexp_is_stable_at_large_inputs():
    x = minidl.tensor(np.array([[1e4, 1e4 - 1.0], [-1e4, -1e4 - 1.0]]), requires_grad=True)
    y = x.logsumexp(axis=1)
    np.testing.assert_allclose(y.data, [1e4 + np.log1p(np.exp(-1)), -1e4 + np.log1p(np.exp(-1))])
    y.sum().backward()
    p = 1 / (1 + np.exp(-1))
    np.testing.assert_allclose(x.grad, [[p, 1 - p], [p, 1 - p]])
    assert np.isfinite(x.grad).all()


def test_logsumexp_of_all_minus_inf_row_is_minus_inf():
    x = minidl.tensor(np.array([[-np.inf, -np.inf], [0.0, 0.0]]))
    with np.errstate(divide="ignore", invalid="ignore"):
        y = minidl.logsumexp(x, axis=1)
    assert y.data[0] == -np.inf and y.data[1] == pytest.approx(np.log(2))
