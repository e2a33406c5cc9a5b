"""Ghost batch norm (Hoffer et al., "Train longer, generalize better", 2017) is BatchNorm2d on each virtual batch."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.gradcheck import gradcheck


def pair(c=3, v=2, seed=0):
    rng = np.random.default_rng(seed)
    ghost, plain = nn.GhostBatchNorm2d(c, v, dtype=np.float64), nn.BatchNorm2d(c, dtype=np.float64)
    for m in (ghost, plain):
        m.weight.data[...] = rng.standard_normal(c) if m is ghost else ghost.weight.data
        m.bias.data[...] = rng.standard_normal(c) if m is ghost else ghost.bias.data
    return ghost, plain, rng


@pytest.mark.parametrize("n, v", [(8, 2), (7, 3), (6, 6), (5, 2)])
def test_equals_batchnorm2d_applied_to_each_virtual_batch(n, v):
    ghost, plain, rng = pair(v=v)
    x = rng.standard_normal((n, 3, 4, 5))
    upstream = rng.standard_normal(x.shape)
    xg, xp = minidl.tensor(x, requires_grad=True), minidl.tensor(x, requires_grad=True)
    y = ghost(xg)
    (y * minidl.tensor(upstream)).sum().backward()
    parts = [plain(xp[s : s + v]) for s in range(0, n, v)]  # one batch norm per virtual batch, in order
    (minidl.cat(parts, axis=0) * minidl.tensor(upstream)).sum().backward()
    np.testing.assert_allclose(y.data, minidl.cat(parts, axis=0).data, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(xg.grad, xp.grad, rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(ghost.weight.grad, plain.weight.grad, rtol=1e-10)
    np.testing.assert_allclose(ghost.bias.grad, plain.bias.grad, rtol=1e-10)
    np.testing.assert_allclose(ghost.running_mean, plain.running_mean, rtol=1e-12)
    np.testing.assert_allclose(ghost.running_var, plain.running_var, rtol=1e-12)
    assert int(ghost.num_batches_tracked) == -(-n // v)
    ghost.eval(), plain.eval()
    np.testing.assert_allclose(ghost(minidl.tensor(x)).data, plain(minidl.tensor(x)).data, rtol=1e-12)


def test_differs_from_whole_batch_statistics_and_is_gradient_checked():
    ghost, plain, rng = pair(c=2, v=2, seed=1)
    x = rng.standard_normal((4, 2, 3, 3))
    assert not np.allclose(ghost(minidl.tensor(x)).data, plain(minidl.tensor(x)).data)
    ghost = nn.GhostBatchNorm2d(2, 2, dtype=np.float64, track_running_stats=False)
    assert gradcheck(lambda t: ghost(t), [minidl.tensor(x, requires_grad=True)])


def test_bad_virtual_batch_size_and_shared_statistics_are_refused():
    with pytest.raises(ValueError, match="virtual_batch_size must be an integer >= 1, got 0"):
        nn.GhostBatchNorm2d(3, 0)
    with pytest.raises(ValueError, match="never shared across ranks"):
        nn.GhostBatchNorm2d(3, 2)(minidl.zeros((4, 3, 2, 2)), gather=lambda a: a)
