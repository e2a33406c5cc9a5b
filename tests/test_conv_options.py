"""Conv2d's PyTorch options: groups (depthwise included), dilation, padding="same"/"valid", padding_mode.

Each against a direct loop over output pixels (float64), gradient-checked in float64 through every
algorithm that takes it, and against PyTorch on the same weights (when torch is installed).
"""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn.pad import pad2d


def conv2d_direct(x, w, b, stride, padding, dilation, groups):
    """out[n, o, i, j] = b[o] + sum over c in o's group, taps (u, v) of w[o, c, u, v] * x_pad[n, c, s*i + d*u, s*j + d*v]."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n, o, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * sh : i * sh + dh * (kh - 1) + 1 : dh, j * sw : j * sw + dw * (kw - 1) + 1 : dw]
            for g in range(groups):
                out[:, g * og : (g + 1) * og, i, j] = np.tensordot(
                    patch[:, g * cg : (g + 1) * cg], w[g * og : (g + 1) * og], axes=([1, 2, 3], [1, 2, 3])
                )
    return out if b is None else out + b[None, :, None, None]


OPTION_CASES = [  # (N, C, H, W, O, kernel, stride, padding, dilation, groups)
    (2, 4, 6, 5, 6, (3, 3), (1, 1), (1, 1), (1, 1), 2),  # two groups
    (2, 3, 6, 6, 6, (3, 3), (2, 1), (1, 0), (1, 1), 3),  # depthwise, channel multiplier 2, strided
    (1, 2, 7, 8, 3, (3, 2), (1, 1), (2, 1), (2, 3), 1),  # dilation
    (2, 4, 8, 7, 4, (3, 3), (2, 2), (2, 2), (2, 2), 4),  # depthwise, dilated and strided
]


def _case_tensors(rng, case):
    n, c, h, w, o, k, _, _, _, groups = case
    return rng.standard_normal((n, c, h, w)), rng.standard_normal((o, c // groups) + k), rng.standard_normal(o)


@pytest.mark.parametrize("method", ["im2col", "gemm", "auto"])
@pytest.mark.parametrize("case", OPTION_CASES)
def test_options_match_direct_loop_and_gradcheck(rng, case, method):
    *_, s, p, d, groups = case
    x, w, b = _case_tensors(rng, case)
    ours = F.conv2d(minidl.tensor(x), minidl.tensor(w), minidl.tensor(b), s, p, d, groups, method=method)
    np.testing.assert_allclose(ours.data, conv2d_direct(x, w, b, s, p, d, groups), rtol=1e-10, atol=1e-12)
    assert minidl.gradcheck(lambda x, w, b: F.conv2d(x, w, b, s, p, d, groups, method=method), [x, w, b])


@pytest.mark.parametrize("kernel,dilation", [(3, 1), (4, 1), ((2, 3), (2, 1)), (5, 2)])
def test_padding_same_keeps_the_size_and_gradchecks(rng, kernel, dilation):
    x = rng.standard_normal((2, 2, 6, 5))
    conv = nn.Conv2d(2, 3, kernel, padding="same", dilation=dilation, dtype=np.float64)
    assert conv(minidl.tensor(x)).shape == (2, 3, 6, 5)
    assert minidl.gradcheck(
        lambda x, w, b: F.conv2d(x, w, b, 1, "same", dilation), [x, conv.weight.data, conv.bias.data]
    )
    valid = nn.Conv2d(2, 3, 3, padding="valid", dtype=np.float64)
    assert valid(minidl.tensor(x)).shape == (2, 3, 4, 3)


@pytest.mark.parametrize("pad", [(1, 1, 1, 1), (2, 0, 1, 3), (0, 2, 0, 0)])
@pytest.mark.parametrize("mode", ["zeros", "reflect"])
def test_pad2d_matches_numpy_and_gradchecks(rng, pad, mode):
    x = rng.standard_normal((2, 3, 4, 5))
    out = pad2d(minidl.tensor(x), pad, mode)
    ref = np.pad(x, ((0, 0), (0, 0), pad[:2], pad[2:]), mode="constant" if mode == "zeros" else "reflect")
    np.testing.assert_array_equal(out.data, ref)
    assert minidl.gradcheck(lambda t: pad2d(t, pad, mode), [x])


def test_reflect_padding_mode_gradchecks(rng):
    conv = nn.Conv2d(2, 2, 3, padding=2, padding_mode="reflect", dtype=np.float64)
    x = rng.standard_normal((1, 2, 5, 4))
    conv.zero_grad()
    y = conv(minidl.tensor(x))
    assert y.shape == (1, 2, 7, 6)
    assert minidl.gradcheck(lambda x, w: F.conv2d(pad2d(x, (2, 2, 2, 2), "reflect"), w), [x, conv.weight.data])


def test_option_errors():
    with pytest.raises(ValueError, match="not supported: padding_mode='circular'"):
        nn.Conv2d(2, 2, 3, padding_mode="circular")
    with pytest.raises(ValueError, match="not supported: padding_mode='replicate'"):
        nn.Conv2d(2, 2, 3, padding_mode="replicate")
    with pytest.raises(ValueError, match="groups=3 must divide"):
        nn.Conv2d(4, 6, 3, groups=3)
    with pytest.raises(ValueError, match="'same' needs stride 1"):
        nn.Conv2d(2, 2, 3, stride=2, padding="same")
    with pytest.raises(ValueError, match="padding must be an int, a pair, 'valid' or 'same'"):
        nn.Conv2d(2, 2, 3, padding="full")
    with pytest.raises(
        ValueError, match="expected input \\[N, 4, H, W\\] for weight of shape \\(6, 2, 3, 3\\) and groups=2"
    ):
        F.conv2d(minidl.zeros(1, 3, 5, 5), minidl.zeros(6, 2, 3, 3), groups=2)
    with pytest.raises(ValueError, match="smaller than the kernel 5x5 \\(kernel 3x3, dilation \\(2, 2\\)\\)"):
        nn.Conv2d(1, 1, 3, dilation=2)(minidl.zeros(1, 1, 4, 4))
    with pytest.raises(ValueError, match="reflect padding .* must be smaller than the input"):
        nn.Conv2d(1, 1, 3, padding=3, padding_mode="reflect")(minidl.zeros(1, 1, 3, 3))
    with pytest.raises(ValueError, match="implicit method needs"):
        F.conv2d(minidl.zeros(1, 2, 5, 5), minidl.zeros(2, 1, 3, 3), groups=2, method="implicit")


TORCH_CASES = [
    dict(in_channels=4, out_channels=6, kernel_size=3, padding=1, groups=2),
    dict(in_channels=4, out_channels=4, kernel_size=3, stride=2, padding=1, groups=4, bias=False),  # depthwise
    dict(in_channels=3, out_channels=6, kernel_size=3, padding=1, groups=3),  # depthwise, multiplier 2
    dict(in_channels=2, out_channels=3, kernel_size=(3, 2), dilation=(2, 3), padding=(2, 1)),
    dict(in_channels=2, out_channels=3, kernel_size=3, padding="same", dilation=2),
    dict(in_channels=2, out_channels=3, kernel_size=4, padding="same"),  # uneven "same" padding
    dict(in_channels=2, out_channels=3, kernel_size=(2, 3), padding="valid"),
    dict(in_channels=2, out_channels=3, kernel_size=3, padding=1, padding_mode="reflect"),
    dict(in_channels=2, out_channels=2, kernel_size=3, padding=(2, 1), padding_mode="reflect", groups=2),
    dict(in_channels=64, out_channels=64, kernel_size=3, padding=1),  # deep enough for "auto" to take gemm
]


@pytest.mark.parametrize("args", TORCH_CASES)
def test_options_parity_with_torch(rng, args):
    torch = pytest.importorskip("torch")
    from torch_reference import compare_forward_backward, load_into_minidl

    ours, theirs = nn.Conv2d(**args), torch.nn.Conv2d(**args)
    load_into_minidl(ours, theirs)
    x = rng.standard_normal((2, args["in_channels"], 9, 8)).astype(np.float32)
    compare_forward_backward(ours, theirs, x, rtol=1e-4, atol=1e-4)
