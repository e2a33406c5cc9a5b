"""Pool options against PyTorch: ceil_mode, dilation, padding, count_include_pad, divisor_override, unbatched."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import minidl  # noqa: E402
from minidl import nn  # noqa: E402

CASES = [  # kwargs, input shape
    ({"kernel_size": 3, "stride": 2, "padding": 1, "ceil_mode": True}, (2, 3, 7, 8)),
    ({"kernel_size": 2, "ceil_mode": True}, (2, 2, 5, 5)),
    ({"kernel_size": (3, 2), "stride": (2, 3), "padding": (1, 0), "ceil_mode": True}, (1, 2, 9, 7)),
    ({"kernel_size": 3, "stride": 1, "padding": 1}, (3, 6, 6)),  # unbatched
]


@pytest.mark.parametrize("kwargs, shape", CASES)
@pytest.mark.parametrize("dilation", [1, 2])
def test_max_pool_matches_torch(rng, kwargs, shape, dilation):
    _compare(rng, nn.MaxPool2d(dilation=dilation, **kwargs), torch.nn.MaxPool2d(dilation=dilation, **kwargs), shape)


@pytest.mark.parametrize("kwargs, shape", CASES)
@pytest.mark.parametrize("extra", [{}, {"count_include_pad": False}, {"divisor_override": 2}])
def test_avg_pool_matches_torch(rng, kwargs, shape, extra):
    _compare(rng, nn.AvgPool2d(**kwargs, **extra), torch.nn.AvgPool2d(**kwargs, **extra), shape)


def _compare(rng, ours, theirs, shape):
    x = rng.standard_normal(shape)
    a = minidl.tensor(x, requires_grad=True)
    b = torch.tensor(x, requires_grad=True)
    ya, yb = ours(a), theirs(b)
    assert ya.shape == tuple(yb.shape)
    np.testing.assert_allclose(ya.data, yb.detach().numpy(), rtol=1e-12)
    g = rng.standard_normal(ya.shape)
    ya.backward(g)
    yb.backward(torch.tensor(g))
    np.testing.assert_allclose(a.grad, b.grad.numpy(), rtol=1e-12, atol=1e-14)
