"""The losses and their options against PyTorch: values and gradients (input, and soft targets) in float64."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
TF = torch.nn.functional

import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl import nn  # noqa: E402


def _both(ours_fn, theirs_fn, arrays, grad_of):
    """Run both on the same float64 arrays; compare the loss and the gradients of arrays[i] for i in grad_of."""
    ours = [minidl.tensor(a, requires_grad=i in grad_of) if a.dtype.kind == "f" else a for i, a in enumerate(arrays)]
    theirs = [torch.tensor(a, requires_grad=i in grad_of and a.dtype.kind == "f") for i, a in enumerate(arrays)]
    a, b = ours_fn(*ours), theirs_fn(*theirs)
    np.testing.assert_allclose(a.data, b.detach().numpy(), rtol=1e-10, atol=1e-12)
    r = np.random.default_rng(5).standard_normal(a.shape)
    with np.errstate(invalid="ignore"):
        (a * minidl.tensor(r)).sum().backward()
    (b * torch.tensor(r)).sum().backward()
    for i in grad_of:
        np.testing.assert_allclose(ours[i].grad, theirs[i].grad.numpy(), rtol=1e-9, atol=1e-12, err_msg=f"grad {i}")


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 5), (3, 5, 4), (2, 5, 2, 3), (5,)])
@pytest.mark.parametrize(
    "weighted, eps, ignore_index", [(False, 0.0, -100), (True, 0.0, 1), (True, 0.25, 2), (False, 0.1, -100)]
)
def test_cross_entropy_index_targets_match_torch(rng, reduction, shape, weighted, eps, ignore_index):
    x = rng.standard_normal(shape)
    t = rng.integers(0, 5, () if len(shape) == 1 else (shape[0],) + shape[2:])
    w = rng.random(5) + 0.5 if weighted else None
    tw = None if w is None else torch.tensor(w)
    kw = {"reduction": reduction, "label_smoothing": eps, "ignore_index": ignore_index}
    _both(
        lambda x, t: F.cross_entropy(x, t, weight=w, **kw),
        lambda x, t: TF.cross_entropy(x, t, weight=tw, **kw),
        [x, t],
        grad_of=[0],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 5), (2, 5, 3), (5,)])
@pytest.mark.parametrize("weighted, eps", [(False, 0.0), (True, 0.2)])
def test_cross_entropy_probability_targets_match_torch(rng, reduction, shape, weighted, eps):
    x, y = rng.standard_normal(shape), rng.random(shape)
    w = rng.random(5) + 0.5 if weighted else None
    tw = None if w is None else torch.tensor(w)
    kw = {"reduction": reduction, "label_smoothing": eps}
    _both(
        lambda x, y: F.cross_entropy(x, y, weight=w, **kw),
        lambda x, y: TF.cross_entropy(x, y, weight=tw, **kw),
        [x, y],
        grad_of=[0, 1],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_every_target_ignored_matches_torch(rng, reduction):
    x, t = rng.standard_normal((3, 4)), np.full(3, -100)
    for eps, w in ((0.0, None), (0.1, np.ones(4))):
        tw = None if w is None else torch.tensor(w)
        kw = {"reduction": reduction, "label_smoothing": eps}
        with np.errstate(invalid="ignore"):
            _both(
                lambda x, t: F.cross_entropy(x, t, weight=w, **kw),  # noqa: B023
                lambda x, t: TF.cross_entropy(x, t, weight=tw, **kw),  # noqa: B023
                [x, t],
                grad_of=[0],
            )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("shape", [(6, 4), (2, 4, 3)])
def test_nll_loss_matches_torch(rng, reduction, shape):
    x = rng.standard_normal(shape)
    t = rng.integers(0, 4, (shape[0],) + shape[2:])
    w = rng.random(4) + 0.5
    _both(
        lambda x, t: F.nll_loss(x, t, weight=w, ignore_index=3, reduction=reduction),
        lambda x, t: TF.nll_loss(x, t, weight=torch.tensor(w), ignore_index=3, reduction=reduction),
        [x, t],
        grad_of=[0],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("use_w, use_p", [(False, False), (True, False), (False, True), (True, True)])
def test_bce_with_logits_matches_torch(rng, reduction, use_w, use_p):
    x, y = rng.standard_normal((4, 2, 3)) * 3, rng.random((4, 2, 3))
    w = rng.random((2, 1)) + 0.5 if use_w else None
    p = rng.random(3) * 3 if use_p else None
    tt = lambda a: None if a is None else torch.tensor(a)  # noqa: E731
    _both(
        lambda x, y: F.binary_cross_entropy_with_logits(x, y, w, reduction=reduction, pos_weight=p),
        lambda x, y: TF.binary_cross_entropy_with_logits(x, y, tt(w), reduction=reduction, pos_weight=tt(p)),
        [x, y],
        grad_of=[0, 1],
    )


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mse_loss_matches_torch(rng, reduction):
    x, y = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    _both(
        lambda x, y: F.mse_loss(x, y, reduction=reduction),
        lambda x, y: TF.mse_loss(x, y, reduction=reduction),
        [x, y],
        grad_of=[0, 1],
    )


def test_loss_modules_state_dicts_match_torch():
    w, p = np.array([1.0, 2.0, 3.0]), np.array([0.5, 1.5, 2.0])
    pairs = [
        (nn.CrossEntropyLoss(weight=w), torch.nn.CrossEntropyLoss(weight=torch.tensor(w))),
        (nn.NLLLoss(), torch.nn.NLLLoss()),
        (nn.BCEWithLogitsLoss(pos_weight=p), torch.nn.BCEWithLogitsLoss(pos_weight=torch.tensor(p))),
        (nn.MSELoss(), torch.nn.MSELoss()),
    ]
    for ours, theirs in pairs:
        assert list(ours.state_dict()) == list(theirs.state_dict())
        for k, v in theirs.state_dict().items():
            np.testing.assert_array_equal(ours.state_dict()[k], v.numpy())
