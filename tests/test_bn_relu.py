"""The fused batch norm (+ residual) + ReLU (nn/bn_relu.py) against its plain twin, the composed ops, and gradcheck."""

import sys

import numpy as np
import pytest

import minidl
from minidl import amp, nn
from minidl.nn.bn_relu import BatchNormReLUFunction, batch_norm_relu, fusable


def _composed(x, bn, r=None):
    out = bn(x)
    return (out if r is None else out + r).relu()


def _run(f, bn, x, r, g):
    """Forward and backward of f(x, bn, r) with upstream gradient g: output, grads of x, gamma, beta, r, running stats."""
    xt = minidl.tensor(x, requires_grad=True)
    rt = None if r is None else minidl.tensor(r, requires_grad=True)
    bn.weight.grad = bn.bias.grad = None
    y = f(xt, bn, rt)
    y.backward(g)
    grads = [xt.grad, bn.weight.grad, bn.bias.grad] + ([] if r is None else [rt.grad])
    return [y.data, *grads, bn.running_mean.copy(), bn.running_var.copy()]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("residual", [False, True])
def test_fused_matches_composed(rng, dtype, residual):
    minidl.set_default_dtype(dtype)
    shape = (4, 3, 5, 6)
    x = (rng.standard_normal(shape) * 3 + 100).astype(dtype)  # a large mean: the two-pass variance matters
    r = rng.standard_normal(shape).astype(dtype) if residual else None
    g = rng.standard_normal(shape).astype(dtype)
    fused, plain = nn.BatchNorm2d(3, momentum=0.3), nn.BatchNorm2d(3, momentum=0.3)
    for bn in (fused, plain):
        bn.weight.data[...] = [1.5, -0.7, 0.0]  # a negative and a zero gamma (zero_init_residual)
        bn.bias.data[...] = [0.2, 0.1, -0.3]
    assert fusable(fused)
    for _ in range(2):  # twice: the running statistics and num_batches_tracked advance alike
        got, want = _run(batch_norm_relu, fused, x, r, g), _run(_composed, plain, x, r, g)
        for a, b in zip(got, want):
            assert a.dtype == b.dtype == dtype
            np.testing.assert_array_equal(a, b)  # the same arithmetic in the same order
    assert int(fused.num_batches_tracked) == int(plain.num_batches_tracked) == 2


@pytest.mark.parametrize("residual", [False, True])
def test_fused_gradcheck(rng, residual):
    minidl.set_default_dtype(np.float64)
    shape = (3, 2, 3, 4)
    bn = nn.BatchNorm2d(2)
    x = rng.standard_normal(shape) * 2 + 1
    w, b = np.array([1.3, -0.8]), np.array([0.1, -0.2])
    r = rng.standard_normal(shape)

    def fn(x, w, b, *rest):
        bn.weight, bn.bias = w, b
        out = batch_norm_relu(x, bn, rest[0] if rest else None)
        assert not out.requires_grad or isinstance(out._ctx, BatchNormReLUFunction)  # the fused op was taken
        return out

    assert minidl.gradcheck(fn, [x, w, b, r] if residual else [x, w, b])


def test_falls_back_to_composed_where_not_fusable(rng):
    minidl.set_default_dtype(np.float64)
    x = minidl.tensor(rng.standard_normal((2, 3, 4, 4)), requires_grad=True)
    bn = nn.BatchNorm2d(3)
    bn.eval()
    assert not fusable(bn)
    np.testing.assert_array_equal(batch_norm_relu(x, bn).data, _composed(x, bn).data)
    bn.train()
    with amp.autocast("bf16"):
        assert not fusable(bn)
    assert not fusable(nn.BatchNorm2d(3, affine=False)) and not fusable(nn.GhostBatchNorm2d(3, 2))
    wide = minidl.tensor(rng.standard_normal((2, 3, 4, 1)))  # a broadcasting residual: the composed ops
    assert batch_norm_relu(x, bn, wide).shape == (2, 3, 4, 4)


def test_resnet_matches_composed(rng, monkeypatch):
    """A ResNet's outputs and gradients with the fused ops and with the composed ones (patched in)."""
    minidl.set_default_dtype(np.float64)
    minidl.manual_seed(0)
    model = nn.resnet(8, width=4)
    x = rng.standard_normal((4, 3, 16, 16))
    resnet_module = sys.modules["minidl.nn.resnet"]  # the name minidl.nn.resnet is the function

    def grads():
        model.zero_grad()
        out = model(minidl.tensor(x))
        out.sum().backward()
        return [out.data] + [p.grad.copy() for p in model.parameters()]

    fused = grads()
    monkeypatch.setattr(resnet_module, "batch_norm_relu", _composed)
    for a, b in zip(fused, grads()):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)


def test_fused_path_leaves_frozen_running_statistics_alone(rng):
    """Inside ``running_stats_frozen`` (an accumulated pass after the first) the fused path, like the composed
    one, normalizes by the batch's statistics and updates no running statistic."""
    from minidl.nn.norm import running_stats_frozen

    bn = nn.BatchNorm2d(3)
    x = minidl.tensor(rng.standard_normal((4, 3, 5, 5)).astype(np.float32))
    before = {k: np.array(v, copy=True) for k, v in bn.state_dict().items()}
    with running_stats_frozen(bn):
        assert fusable(bn)
        out = batch_norm_relu(x, bn)
    assert all(np.array_equal(before[k], v) for k, v in bn.state_dict().items())
    np.testing.assert_array_equal(out.data, _composed(x, nn.BatchNorm2d(3)).data)
    batch_norm_relu(x, bn)  # outside: one update
    assert int(bn.num_batches_tracked) == 1 and not np.array_equal(before["running_mean"], bn.running_mean)
