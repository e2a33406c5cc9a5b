"""The polyphase strided convolution (nn/conv_polyphase.py) against its plain twin, the im2col path, and gradcheck."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl.nn.conv import choose_method

CASES = [  # (N, C, H, W, O, kernel, stride, padding)
    (2, 3, 7, 6, 4, (3, 3), (2, 2), (1, 1)),  # a ResNet's 3x3 stride 2, odd sizes
    (2, 2, 8, 8, 3, (3, 3), (2, 2), (1, 1)),  # even sizes (the widest phase has no spare column)
    (2, 2, 9, 8, 3, (3, 2), (2, 3), (1, 0)),  # unequal strides, a kernel narrower than the stride
    (1, 2, 6, 7, 2, (2, 3), (1, 2), (0, 1)),
    (3, 2, 8, 8, 2, (1, 1), (2, 2), (0, 0)),  # 1x1: only phase (0, 0) has taps
    (2, 2, 10, 9, 3, (5, 4), (3, 2), (2, 3)),  # padding as large as the kernel
    (2, 2, 5, 5, 2, (3, 3), (1, 1), (1, 1)),  # stride 1: one phase
]


@pytest.mark.parametrize("case", CASES)
def test_polyphase_matches_im2col_float64(rng, case):
    n, c, h, w, o, k, s, p = case
    x, wt, b = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k), rng.standard_normal(o)
    results = []
    for method in ("im2col", "polyphase"):
        xt, wtt, bt = (minidl.tensor(a, requires_grad=True) for a in (x, wt, b))
        y = F.conv2d(xt, wtt, bt, s, p, method=method)
        y.backward(np.random.default_rng(1).standard_normal(y.shape))
        results.append((y.data, xt.grad, wtt.grad, bt.grad))
    for a, b_ in zip(*results):
        np.testing.assert_allclose(a, b_, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", CASES[:3])
def test_polyphase_gradcheck(rng, case):
    n, c, h, w, o, k, s, p = case
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k)
    assert minidl.gradcheck(lambda x, w: F.conv2d(x, w, None, s, p, method="polyphase"), [x, wt])


def test_polyphase_float32_at_resnet_size(rng):
    """ResNet-20's first stride-2 layer in float32: against im2col, forward and both gradients."""
    x = rng.standard_normal((4, 16, 32, 32)).astype(np.float32)
    wt = (rng.standard_normal((32, 16, 3, 3)) / 12).astype(np.float32)
    g = rng.standard_normal((4, 32, 16, 16)).astype(np.float32)
    results = []
    for method in ("im2col", "polyphase"):
        xt, wtt = minidl.tensor(x, requires_grad=True), minidl.tensor(wt, requires_grad=True)
        y = F.conv2d(xt, wtt, None, 2, 1, method=method)
        y.backward(g)
        assert y.dtype == xt.grad.dtype == wtt.grad.dtype == np.float32
        results.append((y.data, xt.grad, wtt.grad))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


def test_auto_takes_polyphase_for_shallow_strided_layers():
    assert choose_method((32, 16, 3, 3), (2, 2), (1, 1), (1, 1), 1) == "polyphase"
    assert choose_method((512, 256, 3, 3), (2, 2), (1, 1), (1, 1), 1) == "gemm"  # deep: one large product
    assert choose_method((32, 16, 1, 1), (2, 2), (0, 0), (1, 1), 1) == "im2col"
    assert choose_method((32, 16, 3, 3), (2, 2), (1, 1), (2, 2), 1) == "gemm"  # dilation
    # a 1x1 kernel on a small map: one product over the batch (ResNet-50's last stages)
    assert choose_method((2048, 512, 1, 1), (1, 1), (0, 0), (1, 1), 1, out_pixels=49) == "gemm"
    assert choose_method((2048, 512, 1, 1), (1, 1), (0, 0), (1, 1), 1, out_pixels=196) == "im2col"
    assert choose_method((64, 32, 1, 1), (2, 2), (0, 0), (1, 1), 1, out_pixels=64) == "im2col"  # ResNet-20's
    assert choose_method((64, 3, 7, 7), (2, 2), (3, 3), (1, 1), 1) == "gemm"  # ResNet-50's stem


def test_polyphase_refuses_dilation_and_groups():
    x, w = minidl.zeros(1, 4, 8, 8), minidl.zeros(4, 2, 3, 3)
    with pytest.raises(ValueError, match="polyphase method needs dilation 1 and groups 1"):
        F.conv2d(x, w, stride=2, groups=2, method="polyphase")
