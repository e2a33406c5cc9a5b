"""The losses' options against NumPy references written from the definitions, with gradchecks in float64:
cross_entropy (weight, label_smoothing, probability targets, [N, C, d1, ...] and [C] inputs), nll_loss,
binary_cross_entropy_with_logits (weight, pos_weight), mse_loss, and the loss modules."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn

REDUCTIONS = ["mean", "sum", "none"]


def log_softmax_ref(x, axis=1):
    return x - np.log(np.exp(x).sum(axis=axis, keepdims=True))


def cross_entropy_ref(x, t, weight=None, ignore_index=-100, reduction="mean", eps=0.0):
    """PyTorch's documented formula, written out on [N, C, d...] arrays (class axis 1)."""
    c = x.shape[1]
    logp = log_softmax_ref(x)
    w = np.ones(c) if weight is None else weight
    wshape = (1, c) + (1,) * (x.ndim - 2)
    if t.dtype.kind == "f":  # probabilities
        q = (t * (1 - eps) + eps / c) * w.reshape(wshape)
        losses = -(q * logp).sum(axis=1)
        denom = losses.size
    else:
        keep = t != ignore_index
        t0 = np.where(keep, t, 0)
        onehot = np.moveaxis(np.eye(c)[t0], -1, 1)
        q = ((1 - eps) * onehot + eps / c) * w.reshape(wshape) * np.expand_dims(keep, 1)
        losses = -(q * logp).sum(axis=1)
        denom = (w[t0] * keep).sum()
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / denom


def _targets(rng, shape, c, ignore=True):
    t = rng.integers(0, c, shape)
    if ignore:
        t.flat[rng.random(t.size) < 0.3] = -100
        t.flat[0] = 1
    return t


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 4), (3, 4, 2), (2, 3, 2, 3)])
@pytest.mark.parametrize("weighted, eps", [(False, 0.0), (True, 0.0), (False, 0.2), (True, 0.3)])
def test_cross_entropy_index_targets(rng, reduction, shape, weighted, eps):
    x = rng.standard_normal(shape)
    t = _targets(rng, (shape[0],) + shape[2:], shape[1])
    w = rng.random(shape[1]) + 0.5 if weighted else None
    fn = lambda x: F.cross_entropy(x, t, weight=w, reduction=reduction, label_smoothing=eps)  # noqa: E731
    out = fn(minidl.tensor(x))
    np.testing.assert_allclose(out.data, cross_entropy_ref(x, t, w, reduction=reduction, eps=eps), rtol=1e-12)
    assert out.shape == (() if reduction != "none" else t.shape)
    assert minidl.gradcheck(fn, [x])


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(5, 4), (2, 3, 2, 2)])
@pytest.mark.parametrize("weighted, eps", [(False, 0.0), (True, 0.1)])
def test_cross_entropy_probability_targets_differentiate_both_inputs(rng, reduction, shape, weighted, eps):
    x = rng.standard_normal(shape)
    y = rng.random(shape)
    y /= y.sum(axis=1, keepdims=True)
    w = rng.random(shape[1]) + 0.5 if weighted else None
    fn = lambda x, y: F.cross_entropy(x, y, weight=w, reduction=reduction, label_smoothing=eps)  # noqa: E731
    np.testing.assert_allclose(
        fn(minidl.tensor(x), minidl.tensor(y)).data,
        cross_entropy_ref(x, y, w, reduction=reduction, eps=eps),
        rtol=1e-12,
    )
    assert minidl.gradcheck(fn, [x, y])


def test_cross_entropy_unbatched_input(rng):
    x = rng.standard_normal(5)
    for target in (np.array(3), np.eye(5)[3]):
        loss = F.cross_entropy(minidl.tensor(x), target, label_smoothing=0.1)
        assert loss.shape == ()
        np.testing.assert_allclose(
            loss.item(),
            cross_entropy_ref(x[None], np.atleast_1d(target) if target.ndim == 0 else target[None], eps=0.1),
        )
        assert minidl.gradcheck(lambda x, t=target: F.cross_entropy(x, t, reduction="none"), [x])


def test_cross_entropy_float32_large_logits_stay_finite():
    x = minidl.tensor(np.array([[1e4, -1e4, 0.0], [0.0, 1e4, 1e4]], np.float32), requires_grad=True)
    loss = F.cross_entropy(x, np.array([[0.0, 1.0, 0.0], [0.5, 0.5, 0.0]], np.float32), label_smoothing=0.1)
    loss.backward()
    assert loss.dtype == np.float32 and np.isfinite(loss.item()) and np.isfinite(x.grad).all()


def nll_ref(x, t, w=None, ignore_index=-100, reduction="mean"):
    keep = t != ignore_index
    t0 = np.where(keep, t, 0)
    w = np.ones(x.shape[1]) if w is None else w
    picked = np.take_along_axis(x, np.expand_dims(t0, 1), axis=1)[:, 0]
    losses = -w[t0] * picked * keep
    if reduction == "none":
        return losses
    return losses.sum() if reduction == "sum" else losses.sum() / (w[t0] * keep).sum()


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("shape", [(6, 3), (2, 3, 4)])
@pytest.mark.parametrize("weighted", [False, True])
def test_nll_loss(rng, reduction, shape, weighted):
    x = rng.standard_normal(shape)
    t = _targets(rng, (shape[0],) + shape[2:], shape[1])
    w = rng.random(shape[1]) + 0.5 if weighted else None
    fn = lambda x: F.nll_loss(x, t, weight=w, reduction=reduction)  # noqa: E731
    np.testing.assert_allclose(fn(minidl.tensor(x)).data, nll_ref(x, t, w, reduction=reduction), rtol=1e-12)
    assert minidl.gradcheck(fn, [x])
    # log_softmax then nll_loss is cross_entropy
    ce = F.cross_entropy(minidl.tensor(x), t, weight=w, reduction=reduction).data
    np.testing.assert_allclose(F.nll_loss(minidl.tensor(x).log_softmax(1), t, w, reduction=reduction).data, ce)


def bce_ref(x, y, w=None, p=None, reduction="mean"):
    s = 1 / (1 + np.exp(-x))
    p = 1.0 if p is None else p
    losses = -(p * y * np.log(s) + (1 - y) * np.log(1 - s)) * (1.0 if w is None else w)
    return {"none": losses, "sum": losses.sum(), "mean": losses.mean()}[reduction]


@pytest.mark.parametrize("reduction", REDUCTIONS)
@pytest.mark.parametrize("use_w, use_p", [(True, False), (False, True), (True, True)])
def test_bce_with_logits_weight_and_pos_weight(rng, reduction, use_w, use_p):
    x, y = rng.standard_normal((4, 3)) * 2, rng.random((4, 3))
    w = rng.random((4, 1)) + 0.5 if use_w else None  # per example, broadcast
    p = rng.random(3) * 3 if use_p else None  # per class (last axis)
    fn = lambda x, y: F.binary_cross_entropy_with_logits(x, y, w, reduction=reduction, pos_weight=p)  # noqa: E731
    np.testing.assert_allclose(fn(minidl.tensor(x), minidl.tensor(y)).data, bce_ref(x, y, w, p, reduction), rtol=1e-12)
    assert minidl.gradcheck(fn, [x, y])


@pytest.mark.parametrize("reduction", REDUCTIONS)
def test_mse_loss(rng, reduction):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    fn = lambda x, y: F.mse_loss(x, y, reduction=reduction)  # noqa: E731
    sq = (x - y) ** 2
    np.testing.assert_allclose(
        fn(minidl.tensor(x), minidl.tensor(y)).data, {"none": sq, "sum": sq.sum(), "mean": sq.mean()}[reduction]
    )
    assert minidl.gradcheck(fn, [x, y])
    with pytest.warns(UserWarning, match="broadcast"):
        F.mse_loss(minidl.tensor(x), minidl.tensor(y[:1]))


def test_loss_modules_hold_their_options_as_pytorchs(rng):
    x, t = rng.standard_normal((4, 3)), np.array([0, 2, -100, 1])
    w = np.array([1.0, 2.0, 0.5])
    m = nn.CrossEntropyLoss(weight=w, label_smoothing=0.1, reduction="sum")
    np.testing.assert_allclose(m(minidl.tensor(x), t).data, cross_entropy_ref(x, t, w, reduction="sum", eps=0.1))
    assert list(m.state_dict()) == ["weight"] and list(nn.CrossEntropyLoss().state_dict()) == []
    t2 = np.array([0, 2, 2, 1])
    np.testing.assert_allclose(nn.NLLLoss(w, ignore_index=2)(minidl.tensor(x), t2).data, nll_ref(x, t2, w, 2))
    y = rng.random((4, 3))
    bce = nn.BCEWithLogitsLoss(pos_weight=np.array([1.0, 2.0, 3.0]))
    assert list(bce.state_dict()) == ["pos_weight"]
    np.testing.assert_allclose(bce(minidl.tensor(x), y).data, bce_ref(x, y, p=np.array([1.0, 2.0, 3.0])))
    np.testing.assert_allclose(nn.MSELoss(reduction="sum")(minidl.tensor(x), y).data, ((x - y) ** 2).sum())


def test_loss_errors_name_the_problem(rng):
    x = minidl.tensor(rng.standard_normal((2, 3)))
    with pytest.raises(
        ValueError, match=r"pos_weight of shape \(2,\) does not broadcast to the logits' shape \(2, 3\)"
    ):
        F.binary_cross_entropy_with_logits(x, np.zeros((2, 3)), pos_weight=np.ones(2))
    with pytest.raises(ValueError, match="reduction must be one of"):
        nn.MSELoss(reduction="avg")
    with pytest.raises(NotImplementedError, match="not supported: size_average"):
        nn.NLLLoss(size_average=False)
    with pytest.raises(NotImplementedError, match="not supported: a gradient with respect to a loss's weight"):
        F.cross_entropy(x, np.array([0, 1]), weight=minidl.tensor(np.ones(3), requires_grad=True))
    with pytest.raises(IndexError, match="target 3 is out of range for 3 classes"):
        F.nll_loss(x, np.array([0, 3]))


@pytest.mark.parametrize("weighted, eps", [(False, 0.0), (True, 0.1)])
def test_float32_stays_float32_inside_the_op(rng, weighted, eps):
    """No silent float64 buffers (they made the LM's [400, 10000] loss 2.5x slower once): the Function's own
    forward and backward results are float32 for float32 logits."""
    from minidl.ops.loss import CrossEntropy

    x = rng.standard_normal((6, 5)).astype(np.float32)
    fn = CrossEntropy()
    w = rng.random(5) + 0.5 if weighted else None
    loss = fn.forward(x, np.array([0, 1, 2, -100, 4, 1]), weight=w, label_smoothing=eps)
    fn.needs_input_grad = (True, False)
    grad, _ = fn.backward(np.float32(1.0))
    assert loss.dtype == np.float32 and grad.dtype == np.float32
