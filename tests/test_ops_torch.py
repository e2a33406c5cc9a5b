"""Parity with PyTorch: forward values and gradients of composite expressions (skipped without torch)."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F

torch = pytest.importorskip("torch")


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


@pytest.fixture
def rng():
    return np.random.default_rng(42)


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_mlp_with_softmax_cross_entropy(rng, reduction):
    x, w1, b1 = rng.standard_normal((8, 5)), rng.standard_normal((5, 7)), rng.standard_normal(7)
    w2, b2 = rng.standard_normal((7, 3)), rng.standard_normal(3)
    t = rng.integers(0, 3, 8)
    t[[1, 4]] = -100

    def ours(x, w1, b1, w2, b2, t):
        return F.cross_entropy((x @ w1 + b1).relu() @ w2 + b2, t, reduction=reduction)

    def theirs(x, w1, b1, w2, b2, t):
        return torch.nn.functional.cross_entropy((x @ w1 + b1).relu() @ w2 + b2, t, reduction=reduction)

    compare(ours, theirs, [x, w1, b1, w2, b2, t])


def test_tanh_sigmoid_mlp_with_bce(rng):
    x, w, y = rng.standard_normal((6, 4)), rng.standard_normal((4, 2)), rng.random((6, 2))
    compare(
        lambda x, w, y: F.binary_cross_entropy_with_logits((x @ w).tanh() * 3 - (x @ w).sigmoid(), y),
        lambda x, w, y: torch.nn.functional.binary_cross_entropy_with_logits((x @ w).tanh() * 3 - (x @ w).sigmoid(), y),
        [x, w, y],
    )


def test_logsumexp_of_broadcast_product(rng):
    a, b = rng.standard_normal((3, 1, 4)), rng.standard_normal((5, 1))
    compare(
        lambda a, b: (a * b * 100).logsumexp(axis=(0, 2)), lambda a, b: torch.logsumexp(a * b * 100, dim=(0, 2)), [a, b]
    )


def test_softmax_log_softmax_at_large_inputs(rng):
    x = rng.standard_normal((4, 6)) * 1e4
    compare(
        lambda x: x.softmax(axis=0) * x.log_softmax(axis=1),
        lambda x: torch.softmax(x, 0) * torch.log_softmax(x, 1),
        [x],
        rtol=1e-9,
    )


def test_indexing_with_repeated_indices_and_masks(rng):
    x = rng.standard_normal((5, 4))
    idx = np.array([0, 3, 3, 0, 0])
    mask = x[:, 0] > 0

    def ours(x):
        return (x[idx][:, 1:3] * x[idx[::-1], ::2]).sum(axis=1) + x[mask].sum() + x[1:4:2, -1].max()

    def theirs(x):
        tidx, tmask = torch.tensor(idx), torch.tensor(mask)
        return (x[tidx][:, 1:3] * x[tidx.flip(0), ::2]).sum(1) + x[tmask].sum() + x[1:4:2, -1].max()

    compare(ours, theirs, [x])


def test_concatenate_split_pad_stack_chain(rng):
    x, y = rng.standard_normal((4, 6)), rng.standard_normal((2, 6))

    def ours(x, y):
        a, b = minidl.split(minidl.concatenate([x, y], axis=0), 2, axis=1)
        p = minidl.pad(a * b, ((1, 0), (0, 2)), value=0.5)
        return minidl.stack([p, p.exp()], axis=1).tanh()

    def theirs(x, y):
        a, b = torch.split(torch.cat([x, y], 0), 3, dim=1)  # torch's split takes the part SIZE
        p = torch.nn.functional.pad(a * b, (0, 2, 1, 0), value=0.5)  # torch: last axis first
        return torch.stack([p, p.exp()], 1).tanh()

    compare(ours, theirs, [x, y])


def test_max_min_maximum_ties_match_torch():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]])
    y = np.array([[1.0, 0.0, 3.0], [2.0, 5.0, 0.0]])
    compare(
        lambda x, y: minidl.maximum(x, y) * minidl.minimum(x, y) + x.max(axis=1, keepdims=True),
        lambda x, y: torch.maximum(x, y) * torch.minimum(x, y) + torch.amax(x, 1, keepdim=True),
        [x, y],
    )
    compare(lambda x: x.min(axis=0) + x.max(), lambda x: torch.amin(x, 0) + torch.amax(x), [x])


def test_where_clip_abs_expand_mean(rng):
    x, y = rng.standard_normal((3, 1, 4)), rng.standard_normal((2, 4))

    def ours(x, y):
        z = minidl.where(x > 0, x * y, y.abs()).clip(-0.5, 0.8)
        return z.mean(axis=(0, 2)) + x.expand(3, 2, 4).min(axis=-1).mean(axis=0)

    def theirs(x, y):
        z = torch.where(x > 0, x * y, y.abs()).clip(-0.5, 0.8)
        return z.mean(dim=(0, 2)) + torch.amin(x.expand(3, 2, 4), -1).mean(0)

    compare(ours, theirs, [x, y])


def test_batched_matmul_broadcast_and_reshapes(rng):
    a, b = rng.standard_normal((2, 1, 3, 4)), rng.standard_normal((5, 4, 2))
    compare(
        lambda a, b: (a @ b).transpose(0, 2, 1, 3).reshape(2, 5, -1).flatten(1).unsqueeze(0).squeeze(0) ** 2,
        lambda a, b: (a @ b).permute(0, 2, 1, 3).reshape(2, 5, -1).flatten(1).unsqueeze(0).squeeze(0) ** 2,
        [a, b],
    )
