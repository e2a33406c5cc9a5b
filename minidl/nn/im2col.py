"""im2col and col2im: convolution and pooling as array copies plus one matrix product.

A 2-D window of size kh x kw sliding over an NCHW image with stride s and zero padding p
touches, for kernel tap (i, j), the input pixels

    x_pad[n, c, i + s*oh, j + s*ow]      for every output position (oh, ow).

For a fixed tap that is one strided slice of the padded input, so im2col is a loop over the
kh * kw taps, each copying one slice (Chainer's formulation), into

    cols[n, c, i, j, oh, ow]             shape [N, C, kh, kw, OH, OW].

Reshaped to [N, C*kh*kw, OH*OW] (no copy: cols is contiguous), a convolution is one batched
matrix product with the weight [O, C*kh*kw], and its output [N, O, OH*OW] is already NCHW.
col2im is the adjoint: the same loop, adding each tap's slice back (``+=``: a pixel shared by
overlapping windows collects the gradient of every window it is in).

    OH = (H + 2p - kh) // s + 1,  OW = (W + 2p - kw) // s + 1.

With dilation d the taps spread out: tap (i, j) reads x_pad[n, c, d*i + s*oh, d*j + s*ow], and the
window spans d*(k - 1) + 1 pixels in place of k.
"""

from __future__ import annotations

import numpy as np


def pair(v: int | tuple[int, int], name: str) -> tuple[int, int]:
    """An int or a pair of ints -> a pair of ints (kernel_size=3 means 3x3)."""
    t = (v, v) if isinstance(v, int | np.integer) else tuple(v)
    if len(t) != 2 or not all(isinstance(e, int | np.integer) for e in t):
        raise ValueError(f"{name} must be an int or a pair of ints, got {v!r}")
    return int(t[0]), int(t[1])


def conv_output_size(size: int, kernel: int, stride: int, padding: int, dilation: int = 1) -> int:
    """Number of window positions along one axis: (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1."""
    return (size + 2 * padding - dilation * (kernel - 1) - 1) // stride + 1


def check_window(
    x_shape: tuple[int, ...],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    op: str,
    dilation: tuple[int, int] = (1, 1),
) -> tuple[int, int]:
    """Validate an NCHW input against a window; return (OH, OW) or raise a ValueError naming the problem."""
    if len(x_shape) != 4:
        raise ValueError(f"{op}: expected a 4-D input [N, C, H, W], got shape {tuple(x_shape)}")
    if min(kernel) < 1 or min(stride) < 1 or min(padding) < 0 or min(dilation) < 1:
        raise ValueError(
            f"{op}: kernel_size, stride and dilation must be >= 1 and padding >= 0, got "
            f"kernel_size={kernel}, stride={stride}, padding={padding}, dilation={dilation}"
        )
    h, w = x_shape[2:]
    oh = conv_output_size(h, kernel[0], stride[0], padding[0], dilation[0])
    ow = conv_output_size(w, kernel[1], stride[1], padding[1], dilation[1])
    if oh < 1 or ow < 1:
        span = tuple(d * (k - 1) + 1 for k, d in zip(kernel, dilation))
        raise ValueError(
            f"{op}: input of spatial size {h}x{w} (padding {padding}) is smaller than "
            f"the kernel {span[0]}x{span[1]}"
            + (f" (kernel {kernel[0]}x{kernel[1]}, dilation {dilation})" if span != kernel else "")
        )
    return oh, ow


def check_conv_args(x: np.ndarray, weight: np.ndarray, bias: np.ndarray | None, groups: int = 1) -> None:
    """Raise a clear error unless x [N, C, H, W], weight [O, C/groups, kh, kw] and bias [O] (or None) fit together."""
    if weight.ndim != 4:
        raise ValueError(f"conv2d: weight must be 4-D [out, in/groups, kh, kw], got shape {weight.shape}")
    o, c = weight.shape[0], weight.shape[1] * groups
    if groups < 1 or o % groups:
        raise ValueError(f"conv2d: groups={groups} must be >= 1 and divide the {o} output channels")
    if x.ndim != 4 or x.shape[1] != c:
        raise ValueError(
            f"conv2d: expected input [N, {c}, H, W] for weight of shape {weight.shape} and groups={groups}, "
            f"got shape {x.shape}"
        )
    if x.dtype != weight.dtype:
        raise TypeError(f"conv2d: input dtype {x.dtype} differs from weight dtype {weight.dtype}")
    if bias is not None and bias.shape != (o,):
        raise ValueError(f"conv2d: bias must have shape ({o},), got {bias.shape}")


def pad2d(x: np.ndarray, padding: tuple[int, int], value: float = 0.0) -> np.ndarray:
    """x [N, C, H, W] with ``padding`` rows/columns of ``value`` on each side (x itself if no padding)."""
    ph, pw = padding
    if ph == 0 and pw == 0:
        return x
    n, c, h, w = x.shape
    out = np.full((n, c, h + 2 * ph, w + 2 * pw), value, dtype=x.dtype)
    out[:, :, ph : ph + h, pw : pw + w] = x
    return out


def im2col(
    x: np.ndarray,
    kernel: tuple[int, int],
    stride: tuple[int, int],
    padding: tuple[int, int],
    pad_value: float = 0.0,
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """x [N, C, H, W] -> cols [N, C, kh, kw, OH, OW], cols[n, c, i, j, oh, ow] = x_pad[n, c, d*i + s*oh, d*j + s*ow].

    ``pad_value`` fills the border (0 for convolution and average pooling, -inf for max pooling).
    """
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = check_window(x.shape, kernel, stride, padding, "im2col", dilation)
    xp = pad2d(x, padding, pad_value)
    cols = np.empty(x.shape[:2] + (kh, kw, oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, :, i, j] = xp[:, :, dh * i : dh * i + sh * oh : sh, dw * j : dw * j + sw * ow : sw]
    return cols


def col2im(
    cols: np.ndarray,
    x_shape: tuple[int, ...],
    stride: tuple[int, int],
    padding: tuple[int, int],
    dilation: tuple[int, int] = (1, 1),
) -> np.ndarray:
    """The adjoint of im2col: cols [N, C, kh, kw, OH, OW] -> x [N, C, H, W], summing overlaps."""
    n, c, kh, kw, oh, ow = cols.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    h, w = x_shape[2:]
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            xp[:, :, dh * i : dh * i + sh * oh : sh, dw * j : dw * j + sw * ow : sw] += cols[:, :, i, j]
    return xp[:, :, ph : ph + h, pw : pw + w] if ph or pw else xp
