"""Conv2d (im2col + one matmul) against a direct loop, im2col/col2im adjointness, pooling; gradchecks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn.im2col import col2im, im2col


def conv2d_direct(x, w, b, stride, padding):
    """The definition, one output pixel at a time:
    out[n, o, i, j] = b[o] + sum(x_pad[n, :, s*i:s*i+kh, s*j:s*j+kw] * w[o])."""
    (sh, sw), (ph, pw) = stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, _, hp, wp = xp.shape
    o, _, kh, kw = w.shape
    oh, ow = (hp - kh) // sh + 1, (wp - kw) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh : i * sh + kh, j * sw : j * sw + kw]
            out[:, :, i, j] = np.tensordot(patch, w, axes=([1, 2, 3], [1, 2, 3]))
    return out if b is None else out + b[None, :, None, None]


def pool_direct(x, k, s, p, reduce, pad_value):
    xp = np.pad(x, ((0, 0), (0, 0), (p[0], p[0]), (p[1], p[1])), constant_values=pad_value)
    oh, ow = (xp.shape[2] - k[0]) // s[0] + 1, (xp.shape[3] - k[1]) // s[1] + 1
    out = np.zeros(x.shape[:2] + (oh, ow))
    for i in range(oh):
        for j in range(ow):
            out[:, :, i, j] = reduce(xp[:, :, i * s[0] : i * s[0] + k[0], j * s[1] : j * s[1] + k[1]], axis=(2, 3))
    return out


CONV_CASES = [  # (N, C, H, W, O, kernel, stride, padding, bias)
    (2, 3, 5, 5, 4, (3, 3), (1, 1), (1, 1), True),
    (2, 2, 7, 6, 3, (3, 3), (2, 2), (1, 1), True),  # stride 2
    (1, 2, 6, 7, 2, (2, 3), (1, 2), (0, 1), False),  # non-square kernel, stride and padding; no bias
    (3, 1, 4, 4, 2, (1, 1), (2, 2), (0, 0), False),  # 1x1 projection shortcut
    (1, 2, 5, 4, 2, (5, 4), (1, 1), (0, 0), True),  # kernel = whole image
]


def _methods(case):
    """im2col, gemm and polyphase always, implicit where it applies (stride 1, padding < kernel)."""
    _, _, _, _, _, k, s, p, _ = case
    implicit = s == (1, 1) and p[0] < k[0] and p[1] < k[1]
    return [(case, "im2col"), (case, "gemm"), (case, "polyphase")] + ([(case, "implicit")] if implicit else [])


METHOD_CASES = [mc for case in CONV_CASES for mc in _methods(case)]


@pytest.mark.parametrize("case,method", METHOD_CASES)
def test_conv_matches_direct_loop(rng, case, method):
    n, c, h, w, o, k, s, p, bias = case
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k)
    b = rng.standard_normal(o) if bias else None
    ours = F.conv2d(minidl.tensor(x), minidl.tensor(wt), None if b is None else minidl.tensor(b), s, p, method=method)
    np.testing.assert_allclose(ours.data, conv2d_direct(x, wt, b, s, p), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case,method", METHOD_CASES)
def test_conv_gradcheck(rng, case, method):
    n, c, h, w, o, k, s, p, bias = case
    x, wt = rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c) + k)
    if bias:
        assert minidl.gradcheck(lambda x, w, b: F.conv2d(x, w, b, s, p, method=method), [x, wt, rng.standard_normal(o)])
    else:
        assert minidl.gradcheck(lambda x, w: F.conv2d(x, w, None, s, p, method=method), [x, wt])


def test_implicit_and_im2col_agree_float32(rng):
    """The fast paths (implicit, gemm) against the explicit im2col one at ResNet-like sizes, forward and gradients."""
    x = minidl.tensor(rng.standard_normal((4, 8, 12, 10)).astype(np.float32), requires_grad=True)
    w = minidl.tensor(rng.standard_normal((6, 8, 3, 3)).astype(np.float32) * 0.1, requires_grad=True)
    g = rng.standard_normal((4, 6, 12, 10)).astype(np.float32)
    results = []
    for method in ("im2col", "implicit", "gemm", "polyphase"):
        x.grad = w.grad = None
        y = F.conv2d(x, w, None, 1, 1, method=method)
        y.backward(g)
        results.append((y.data, x.grad, w.grad))
    for fast in results[1:]:
        for a, b in zip(results[0], fast):
            np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize(
    "kernel,padding",
    [((3, 3), (1, 1)), ((2, 3), (0, 1)), ((3, 2), (1, 0)), ((1, 1), (0, 0)), ((2, 2), (1, 1)), ((1, 3), (0, 2))],
)
@pytest.mark.parametrize("input_grad", [True, False])
def test_implicit_weight_grad_with_and_without_input_grad(rng, kernel, padding, input_grad):
    """The implicit path (rows of W + pw values; the weight gradient's g a slice of the input gradient's padded
    g) against the im2col one, with and without an input gradient (a ResNet's stem has none)."""
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3) + kernel)
    g = rng.standard_normal((2, 4, 6 + 2 * padding[0] - kernel[0] + 1, 5 + 2 * padding[1] - kernel[1] + 1))
    results = []
    for method in ("im2col", "implicit"):
        xt, wt = minidl.tensor(x, requires_grad=input_grad), minidl.tensor(w, requires_grad=True)
        F.conv2d(xt, wt, None, 1, padding, method=method).backward(g)
        results.append((wt.grad, xt.grad))
    np.testing.assert_allclose(results[1][0], results[0][0], rtol=1e-10, atol=1e-12)
    if input_grad:
        np.testing.assert_allclose(results[1][1], results[0][1], rtol=1e-10, atol=1e-12)
        assert results[1][1].flags.c_contiguous


@pytest.mark.parametrize("kernel,padding", [((3, 3), (1, 1)), ((2, 3), (0, 1)), ((3, 2), (1, 0)), ((1, 3), (0, 2))])
@pytest.mark.parametrize("method,stride", [("implicit", 1), ("polyphase", 2), ("polyphase", (1, 2))])
def test_weight_grad_transposed_g_matches_plain(rng, kernel, padding, method, stride, monkeypatch):
    """add_weight_grads' transposed-g path (plain "A @ B" products) against its "A @ B^T" twin, in float64:
    directly, and through the implicit and polyphase convolutions (threshold lowered to 1 channel) against
    im2col, plus a gradcheck."""
    from minidl.gradcheck import gradcheck
    from minidl.nn import conv_implicit

    gc, windows = rng.standard_normal((3, 2, 20)), rng.standard_normal((4, 3, 5, 20))
    dws = []
    for threshold in (1, 10**9):
        monkeypatch.setattr(conv_implicit, "NN_MIN_CHANNELS", threshold)
        dws.append(np.ones((4, 2, 5)))
        conv_implicit.add_weight_grads(dws[-1], gc, iter(windows))
    np.testing.assert_allclose(dws[0], dws[1], rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(dws[0], 1 + np.einsum("nol,tncl->toc", gc, windows), rtol=1e-12)

    monkeypatch.setattr(conv_implicit, "NN_MIN_CHANNELS", 1)
    x = rng.standard_normal((2, 3, 6, 5))
    w = rng.standard_normal((4, 3) + kernel)
    grads = []
    for m in ("im2col", method):
        xt, wt = minidl.tensor(x, requires_grad=True), minidl.tensor(w, requires_grad=True)
        y = F.conv2d(xt, wt, None, stride, padding, method=m)
        y.backward(np.arange(y.size, dtype=np.float64).reshape(y.shape) % 7 - 3)
        grads.append((wt.grad, xt.grad))
    for a, b in zip(*grads):
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)
    xt, wt = minidl.tensor(x, requires_grad=True), minidl.tensor(w, requires_grad=True)
    assert gradcheck(lambda a, b: F.conv2d(a, b, None, stride, padding, method=method), (xt, wt))


def test_weight_grads_at_64_channels_match_im2col(rng):
    """At 64 output channels (the default threshold) the transposed-g path runs; against im2col, float64."""
    x, w = rng.standard_normal((3, 32, 6, 4)), rng.standard_normal((64, 32, 3, 3))
    for method, stride in (("implicit", 1), ("polyphase", 2)):
        grads = []
        for m in ("im2col", method):
            xt, wt = minidl.tensor(x, requires_grad=True), minidl.tensor(w, requires_grad=True)
            y = F.conv2d(xt, wt, None, stride, 1, method=m)
            y.backward(np.cos(np.arange(y.size)).reshape(y.shape))
            grads.append((wt.grad, xt.grad))
        for a, b in zip(*grads):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("kh,kw,row,rows", [(3, 3, 6, 4), (2, 3, 5, 3), (3, 1, 4, 2), (1, 2, 7, 3)])
def test_shifted_matmuls_is_the_per_tap_sum(rng, kh, kw, row, rows, monkeypatch):
    """shifted_matmuls (chunked over the batch, cropped) against its definition, the per-tap sum over the whole
    batch, float64, in one chunk and in several."""
    from minidl.nn import conv_implicit

    n, c, o, width = 5, 3, 4, row - 1
    xf = rng.standard_normal((n, c, (rows + kh - 1) * row + kw - 1))
    taps = rng.standard_normal((kh, kw, o, c))
    want = sum(
        np.matmul(taps[i, j], xf[:, :, i * row + j : i * row + j + rows * row]) for i in range(kh) for j in range(kw)
    )
    want = want.reshape(n, o, rows, row)[..., :width]
    for nb in (n, 2):  # one chunk, or chunks of 2 samples (the last one short)
        monkeypatch.setattr(conv_implicit, "chunk_size", lambda *args, nb=nb: nb)
        got = conv_implicit.shifted_matmuls(xf, taps, row, rows, width)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


@settings(max_examples=25)
@given(
    h=st.integers(3, 7),
    w=st.integers(3, 7),
    kh=st.integers(1, 3),
    kw=st.integers(1, 3),
    sh=st.integers(1, 3),
    sw=st.integers(1, 3),
    ph=st.integers(0, 1),
    pw=st.integers(0, 1),
    seed=st.integers(0, 99),
)
def test_col2im_is_the_adjoint_of_im2col(h, w, kh, kw, sh, sw, ph, pw, seed):
    """<im2col(x), c> == <x, col2im(c)> for all x, c: col2im is the exact transpose (what backward needs)."""
    r = np.random.default_rng(seed)
    x = r.standard_normal((2, 2, h, w))
    cols = im2col(x, (kh, kw), (sh, sw), (ph, pw))
    c = r.standard_normal(cols.shape)
    back = col2im(c, x.shape, (sh, sw), (ph, pw))
    assert back.shape == x.shape
    np.testing.assert_allclose(np.sum(cols * c), np.sum(x * back), rtol=1e-10)


def test_conv_module_and_errors(rng):
    conv = nn.Conv2d(3, 8, 3, stride=2, padding=1)
    assert conv.weight.shape == (8, 3, 3, 3) and conv.bias.shape == (8,)
    assert conv(minidl.zeros(2, 3, 32, 32)).shape == (2, 8, 16, 16)
    assert [n for n, _ in nn.Conv2d(3, 8, 3, bias=False).named_parameters()] == ["weight"]
    with pytest.raises(ValueError, match=r"expected input \[N, 3, H, W\]"):
        conv(minidl.zeros(2, 4, 8, 8))
    with pytest.raises(ValueError, match="smaller than the kernel"):
        nn.Conv2d(3, 8, 5)(minidl.zeros(1, 3, 3, 3))
    with pytest.raises(TypeError, match="dtype"):
        conv(minidl.zeros(1, 3, 8, 8, dtype=np.float64))
    with pytest.raises(ValueError, match="kernel_size must be an int or a pair"):
        nn.Conv2d(3, 8, (3, 3, 3))
    with pytest.raises(ValueError, match="implicit method needs stride 1, dilation 1, groups 1"):
        F.conv2d(minidl.zeros(1, 3, 8, 8), conv.weight, stride=2, method="implicit")
    with pytest.raises(ValueError, match="method must be"):
        F.conv2d(minidl.zeros(1, 3, 8, 8), conv.weight, method="fft")


# ---------------------------------------------------------------- pooling
POOL_CASES = [  # (kernel, stride, padding)
    ((2, 2), None, (0, 0)),  # non-overlapping
    ((3, 3), (1, 1), (1, 1)),  # overlapping, padded
    ((3, 2), (2, 1), (1, 0)),  # non-square, overlapping rows
]


@pytest.mark.parametrize("k,s,p", POOL_CASES)
def test_pools_match_direct_loop(rng, k, s, p):
    x = rng.standard_normal((2, 3, 6, 5))
    stride = s or k
    np.testing.assert_allclose(
        F.max_pool2d(minidl.tensor(x), k, s, p).data, pool_direct(x, k, stride, p, np.max, -np.inf)
    )
    np.testing.assert_allclose(
        F.avg_pool2d(minidl.tensor(x), k, s, p).data, pool_direct(x, k, stride, p, np.mean, 0.0), rtol=1e-12
    )


@pytest.mark.parametrize("k,s,p", POOL_CASES)
def test_pools_gradcheck(rng, k, s, p):
    # Distinct values spaced well apart: no ties, so max pooling is differentiable at the point.
    x = rng.permutation(2 * 2 * 6 * 5).reshape(2, 2, 6, 5) * 0.1
    assert minidl.gradcheck(lambda x: F.max_pool2d(x, k, s, p), [x])
    assert minidl.gradcheck(lambda x: F.avg_pool2d(x, k, s, p), [x])
    assert minidl.gradcheck(lambda x: F.avg_pool2d(x, k, s, p, count_include_pad=False), [x])


def test_max_pool_ties_route_gradient_to_first_max():
    x = minidl.tensor(np.ones((1, 1, 2, 4)), requires_grad=True)  # every window is a tie
    F.max_pool2d(x, 2).sum().backward()
    np.testing.assert_array_equal(x.grad[0, 0], [[1, 0, 1, 0], [0, 0, 0, 0]])
    # Overlapping windows whose maximum is the same pixel: that pixel collects both gradients.
    y = minidl.tensor(np.array([[[[0.0, 5.0, 1.0], [2.0, 3.0, 4.0]]]]), requires_grad=True)
    F.max_pool2d(y, (2, 2), stride=1).sum().backward()
    np.testing.assert_array_equal(y.grad[0, 0], [[0, 2, 0], [0, 0, 0]])


@pytest.mark.parametrize("out", [1, 2, (3, 2)])
def test_adaptive_avg_pool(rng, out):
    x = rng.standard_normal((2, 3, 7, 5))
    y = F.adaptive_avg_pool2d(minidl.tensor(x), out).data
    o = (out, out) if isinstance(out, int) else out
    assert y.shape == (2, 3) + o
    if o == (1, 1):
        np.testing.assert_allclose(y[..., 0, 0], x.mean(axis=(2, 3)))
        np.testing.assert_allclose(F.global_avg_pool2d(minidl.tensor(x)).data, x.mean(axis=(2, 3)))
    assert minidl.gradcheck(lambda x: F.adaptive_avg_pool2d(x, out), [x])


def test_pool_modules_and_errors():
    x = minidl.zeros(2, 3, 8, 8)
    assert nn.MaxPool2d(2)(x).shape == (2, 3, 4, 4)
    assert nn.AvgPool2d(3, stride=2, padding=1)(x).shape == (2, 3, 4, 4)
    assert nn.AdaptiveAvgPool2d(1)(x).shape == (2, 3, 1, 1)
    with pytest.raises(ValueError, match="at most half the kernel"):
        nn.MaxPool2d(2, padding=2)
    with pytest.raises(ValueError, match="4-D input"):
        nn.MaxPool2d(2)(minidl.zeros(8, 8))  # 3-D [C, H, W] is an unbatched input, as in PyTorch
