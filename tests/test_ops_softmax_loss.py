"""softmax, log_softmax, and the fused losses F.cross_entropy and F.binary_cross_entropy_with_logits."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from ops_strategies import arrays, check_op

import minidl
import minidl.nn.functional as F


def softmax_reference(x, axis):
    e = np.exp(x)  # the textbook formula: fine at the moderate values drawn here
    return e / e.sum(axis=axis, keepdims=True)


@given(data=st.data())
def test_softmax_log_softmax(data):
    x = data.draw(arrays(min_dims=1, min_side=1))
    axis = data.draw(st.integers(-x.ndim, x.ndim - 1))
    check_op(lambda t: t.softmax(axis), lambda a: softmax_reference(a, axis), [x])
    check_op(lambda t: F.softmax(t, axis=axis), lambda a: softmax_reference(a, axis), [x])
    check_op(lambda t: t.log_softmax(axis), lambda a: np.log(softmax_reference(a, axis)), [x])
    check_op(lambda t: F.log_softmax(t, axis), lambda a: np.log(softmax_reference(a, axis)), [x])


def test_softmax_family_is_stable_at_large_inputs():
    x = minidl.tensor(np.array([[1e4, 1e4 - 2.0, -1e4], [-1e4, -1e4, -1e4 + 1.0]]), requires_grad=True)
    p = x.softmax()
    lp = x.log_softmax()
    lse = x.logsumexp(axis=-1)
    for t in (p, lp, lse):
        assert np.isfinite(t.data).all()
    q = softmax_reference(np.array([[0.0, -2.0, -2e4], [0.0, 0.0, 1.0]]), 1)
    np.testing.assert_allclose(p.data, q, rtol=1e-12)
    np.testing.assert_allclose(lp.data[:, :2], np.log(q[:, :2]), rtol=1e-12)
    (p.sum() + lp.sum() + lse.sum()).backward()
    assert np.isfinite(x.grad).all()
    for fn in (lambda t: t.softmax(), lambda t: t.log_softmax(), lambda t: t.logsumexp(axis=1)):
        assert minidl.gradcheck(fn, [x.data])


def cross_entropy_reference(x, t, reduction, ignore_index=-100):
    logp = x - np.log(np.exp(x).sum(axis=1, keepdims=True))
    keep = t != ignore_index
    losses = np.where(keep, -logp[np.arange(len(t)), np.where(keep, t, 0)], 0.0)
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / keep.sum()


@given(
    n=st.integers(1, 5),
    c=st.integers(1, 5),
    seed=st.integers(0, 2**16),
    reduction=st.sampled_from(["mean", "sum", "none"]),
    ignore=st.booleans(),
)
def test_cross_entropy(n, c, seed, reduction, ignore):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c))
    t = rng.integers(0, c, n)
    if ignore:
        t[rng.random(n) < 0.4] = 7 if c <= 7 else -100
        t[0] = 0  # keep one row, so the mean is defined
    ignore_index = 7 if ignore else -100
    check_op(
        lambda x: F.cross_entropy(x, t, reduction=reduction, ignore_index=ignore_index),
        lambda x: cross_entropy_reference(x, t, reduction, ignore_index),
        [x],
    )


def test_cross_entropy_float32_and_tensor_target():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((6, 11)).astype(np.float32)
    t = minidl.tensor(rng.integers(0, 11, 6))
    logits = minidl.tensor(x, requires_grad=True)
    loss = F.cross_entropy(logits, t)
    assert loss.dtype == np.float32 and loss.shape == ()
    loss.backward()
    assert logits.grad.dtype == np.float32
    p = softmax_reference(x.astype(np.float64), 1)
    p[np.arange(6), t.data] -= 1
    np.testing.assert_allclose(logits.grad, p / 6, rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(loss.item(), cross_entropy_reference(x.astype(np.float64), t.data, "mean"), rtol=1e-6)


def test_cross_entropy_large_logits_and_all_ignored():
    x = minidl.tensor(np.array([[1e4, -1e4, 0.0], [0.0, 1e4, 1e4]]), requires_grad=True)
    loss = F.cross_entropy(x, np.array([1, 2]), reduction="none")
    np.testing.assert_allclose(loss.data, [2e4, np.log(2)])
    loss.sum().backward()
    assert np.isfinite(x.grad).all()
    with np.errstate(invalid="ignore"):
        assert np.isnan(F.cross_entropy(x, np.array([-100, -100])).item())  # mean over no rows, as PyTorch
    assert F.cross_entropy(x, np.array([-100, -100]), reduction="sum").item() == 0.0


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_with_every_target_ignored_has_zero_gradient(reduction):
    """Issue 12, bug 3: the mean over no rows is NaN (PyTorch 2.13 too) but the gradient is 0, not NaN."""
    x = minidl.tensor(np.random.default_rng(0).standard_normal((3, 4)), requires_grad=True)
    with np.errstate(invalid="ignore"):
        loss = F.cross_entropy(x, np.array([5, 5, 5]), reduction=reduction, ignore_index=5)
    assert np.isnan(loss.item()) if reduction == "mean" else not loss.data.any()
    loss.sum().backward()
    np.testing.assert_array_equal(x.grad, np.zeros((3, 4)))


def test_cross_entropy_errors():
    x = minidl.tensor(np.zeros((3, 4)))
    with pytest.raises(IndexError, match=r"target 4 is out of range for 4 classes \(valid: 0..3, or ignore_index"):
        F.cross_entropy(x, np.array([0, 4, 1]))
    with pytest.raises(IndexError, match="target -1 is out of range"):
        F.cross_entropy(x, np.array([0, -1, 1]))
    with pytest.raises(TypeError, match="integer class indices .or float probabilities., got bool"):
        F.cross_entropy(x, np.array([True, False, True]))
    with pytest.raises(ValueError, match=r"probability targets must have the logits' shape \(3, 4\), got \(3,\)"):
        F.cross_entropy(x, np.array([0.0, 1.0, 1.0]))
    with pytest.raises(ValueError, match=r"target shape \(2,\) does not match input \(3, 4\) \(want \[3\]\)"):
        F.cross_entropy(x, np.array([0, 1]))
    with pytest.raises(ValueError, match=r"input must be a float \[N, C, ...\] or \[C\] array, got shape \(\)"):
        F.cross_entropy(minidl.tensor(np.zeros(())), np.array(1))
    with pytest.raises(ValueError, match="label_smoothing must be in"):
        F.cross_entropy(x, np.array([0, 1, 2]), label_smoothing=1.5)
    with pytest.raises(ValueError, match=r"weight must have one entry per class, shape \(4,\)"):
        F.cross_entropy(x, np.array([0, 1, 2]), weight=np.ones(3))
    with pytest.raises(NotImplementedError, match="not supported: size_average"):
        F.cross_entropy(x, np.array([0, 1, 2]), size_average=True)
    with pytest.raises(ValueError, match="reduction must be one of"):
        F.cross_entropy(x, np.array([0, 1, 2]), reduction="avg")


def bce_reference(x, y, reduction):
    s = 1 / (1 + np.exp(-x))
    losses = -(y * np.log(s) + (1 - y) * np.log(1 - s))
    return {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[reduction]


@given(data=st.data())
def test_binary_cross_entropy_with_logits(data):
    x = data.draw(arrays(min_side=1))
    y = np.random.default_rng(data.draw(st.integers(0, 99))).random(x.shape)
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]))
    check_op(
        lambda x, y: F.binary_cross_entropy_with_logits(x, y, reduction=reduction),
        lambda x, y: bce_reference(x, y, reduction),
        [x, y],
    )


def test_bce_is_stable_at_large_logits_and_checks_shapes():
    x = minidl.tensor(np.array([1e4, -1e4, 1e4]), requires_grad=True)
    loss = F.binary_cross_entropy_with_logits(x, np.array([1.0, 0.0, 0.0]), reduction="none")
    np.testing.assert_allclose(loss.data, [0.0, 0.0, 1e4])
    loss.sum().backward()
    np.testing.assert_allclose(x.grad, [0.0, 0.0, 1.0])
    with pytest.raises(ValueError, match=r"target shape \(2,\) differs from logits shape \(3,\)"):
        F.binary_cross_entropy_with_logits(x, np.zeros(2))
