"""Pooling over sliding windows, NCHW (or unbatched CHW): max, average, adaptive average.

A window of kernel (kh, kw), stride s, padding p and dilation d (taps d apart) at output cell (i, j)
covers the padded input's rows i*s_h + a*d_h and columns j*s_w + b*d_w, a < kh, b < kw. ``windows``
gives all of them as one strided view cols [N, C, kh, kw, OH, OW]; a pooling layer reduces over (kh, kw):

    max:      out = max over the window;  the gradient goes to the (first) arg max of each window
    average:  out = sum over the window / divisor; each tap gets dout / divisor

and ``windows_adjoint`` adds the taps' gradients back to the pixels (overlapping windows sum).

Output size per axis, as PyTorch: OH = floor((H + 2p - d(k - 1) - 1) / s) + 1, with ceil instead of floor
when ``ceil_mode`` (then a last window must still start inside the input or its left padding). The
windows ceil_mode adds may run past the right padding: those taps read -inf (max) or 0 (average)
and do not count in the average's divisor.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from minidl.nn.im2col import pair
from minidl.nn.module import Module
from minidl.tensor import Function, Tensor

Size2 = int | tuple[int, int]


class Window(NamedTuple):
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int] = (1, 1)
    ceil_mode: bool = False


def make_window(
    kernel_size: Size2, stride: Size2 | None, padding: Size2, dilation: Size2 = 1, ceil_mode: bool = False
) -> Window:
    k = pair(kernel_size, "kernel_size")
    s = k if stride is None or stride == () else pair(stride, "stride")
    p, d = pair(padding, "padding"), pair(dilation, "dilation")
    if min(k) < 1 or min(s) < 1 or min(d) < 1 or min(p) < 0:
        raise ValueError(
            f"pooling: kernel_size, stride and dilation must be >= 1 and padding >= 0, got {k}, {s}, {d}, {p}"
        )
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"pooling: padding {p} must be at most half the kernel size {k}")
    return Window(k, s, p, d, bool(ceil_mode))


def pool_output_size(size: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    """Window positions along one axis (module docstring)."""
    span = d * (k - 1) + 1
    room = size + 2 * p - span
    out = (-(-room // s) if ceil_mode else room // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:  # the last window would start in the right padding
        out -= 1
    return out


def output_shape(x_shape: tuple[int, ...], w: Window, op: str) -> tuple[int, int]:
    if len(x_shape) != 4:
        raise ValueError(f"{op}: expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got shape {tuple(x_shape)}")
    oh, ow = (
        pool_output_size(x_shape[2 + i], w.kernel[i], w.stride[i], w.padding[i], w.dilation[i], w.ceil_mode)
        for i in (0, 1)
    )
    if oh < 1 or ow < 1:
        raise ValueError(f"{op}: input of spatial size {x_shape[2]}x{x_shape[3]} is smaller than the window {w.kernel}")
    return oh, ow


def windows(x: np.ndarray, w: Window, pad_value: float, op: str) -> tuple[np.ndarray, tuple[int, ...]]:
    """cols [N, C, kh, kw, OH, OW], a read-only strided view of x padded with ``pad_value`` (p before,
    p plus what ceil_mode needs after); also the padded shape, for the adjoint."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    oh, ow = output_shape(x.shape, w, op)
    n, c, h, wd = x.shape
    hp = max(h + 2 * ph, (oh - 1) * sh + dh * (kh - 1) + 1)
    wp = max(wd + 2 * pw, (ow - 1) * sw + dw * (kw - 1) + 1)
    xp = x
    if (hp, wp) != (h, wd):
        xp = np.full((n, c, hp, wp), pad_value, dtype=x.dtype)
        xp[:, :, ph : ph + h, pw : pw + wd] = x
    s_n, s_c, s_h, s_w = xp.strides
    cols = np.lib.stride_tricks.as_strided(
        xp, (n, c, kh, kw, oh, ow), (s_n, s_c, s_h * dh, s_w * dw, s_h * sh, s_w * sw), writeable=False
    )
    return cols, xp.shape


def windows_adjoint(
    dcols: np.ndarray, padded_shape: tuple[int, ...], x_shape: tuple[int, ...], w: Window
) -> np.ndarray:
    """The adjoint of ``windows``: dcols [N, C, kh, kw, OH, OW] -> dx of x's shape, summing overlaps."""
    (kh, kw), (sh, sw), (ph, pw), (dh, dw) = w.kernel, w.stride, w.padding, w.dilation
    oh, ow = dcols.shape[-2:]
    dxp = np.zeros(padded_shape, dtype=dcols.dtype)
    for a in range(kh):
        for b in range(kw):
            dxp[:, :, a * dh : a * dh + sh * (oh - 1) + 1 : sh, b * dw : b * dw + sw * (ow - 1) + 1 : sw] += dcols[
                :, :, a, b
            ]
    return np.ascontiguousarray(dxp[:, :, ph : ph + x_shape[2], pw : pw + x_shape[3]])


def _batched(x: np.ndarray) -> np.ndarray:
    """An unbatched [C, H, W] input as a batch of one (PyTorch's pools take both)."""
    return x[None] if x.ndim == 3 else x


class MaxPool2dFunction(Function):
    def forward(self, x, *, window: Window):
        xb = _batched(x)
        cols, self.padded = windows(xb, window, -np.inf, "max_pool2d")
        n, c, kh, kw, oh, ow = cols.shape
        cols = cols.reshape(n, c, kh * kw, oh, ow)
        # argmax picks the first maximum in row-major window order, as PyTorch's CPU kernel does.
        self.argmax = cols.argmax(axis=2)[:, :, None]
        self.x_shape, self.batched_shape, self.window = x.shape, xb.shape, window
        out = np.take_along_axis(cols, self.argmax, axis=2)[:, :, 0]
        return out if x.ndim == 4 else out[0]

    def backward(self, g):
        g = _batched(g)
        n, c, oh, ow = g.shape
        kh, kw = self.window.kernel
        dcols = np.zeros((n, c, kh * kw, oh, ow), dtype=g.dtype)
        np.put_along_axis(dcols, self.argmax, g[:, :, None], axis=2)
        dx = windows_adjoint(dcols.reshape(n, c, kh, kw, oh, ow), self.padded, self.batched_shape, self.window)
        return dx.reshape(self.x_shape)


def avg_divisor(x_shape: tuple[int, ...], w: Window, count_include_pad: bool, dtype) -> np.ndarray:
    """PyTorch's divisor of every output cell [OH, OW]: the window's size clipped to input + padding, or
    (count_include_pad=False) to the input alone; taps that ceil_mode adds past the padding never count."""
    sizes = []
    for i, out in enumerate(output_shape(x_shape, w, "avg_pool2d")):
        k, s, p, size = w.kernel[i], w.stride[i], w.padding[i], x_shape[2 + i]
        start = np.arange(out) * s - p
        end = np.minimum(start + k, size + p)
        sizes.append(np.minimum(end, size) - np.maximum(start, 0) if not count_include_pad else end - start)
    return np.outer(sizes[0], sizes[1]).astype(dtype)


class AvgPool2dFunction(Function):
    """out = sum over the window / divisor (``avg_divisor``, or ``divisor_override``)."""

    def forward(self, x, *, window: Window, count_include_pad=True, divisor_override=None):
        xb = _batched(x)
        cols, self.padded = windows(xb, window, 0.0, "avg_pool2d")
        if divisor_override is not None:
            divisor = np.asarray(divisor_override, dtype=x.dtype)
        else:
            divisor = avg_divisor(xb.shape, window, count_include_pad, x.dtype)
            divisor = divisor.flat[0] if (divisor == divisor.flat[0]).all() else divisor  # one size: a scalar
        self.divisor, self.x_shape, self.batched_shape, self.window = divisor, x.shape, xb.shape, window
        out = np.zeros(cols.shape[:2] + cols.shape[4:], dtype=x.dtype)
        for a in range(cols.shape[2]):  # tap by tap: each a strided [N, C, OH, OW] view, summed into out
            for b in range(cols.shape[3]):
                out += cols[:, :, a, b]
        out /= divisor
        return out if x.ndim == 4 else out[0]

    def backward(self, g):
        g = _batched(g)
        n, c, oh, ow = g.shape
        kh, kw = self.window.kernel
        dcols = np.broadcast_to((g / self.divisor)[:, :, None, None], (n, c, kh, kw, oh, ow))
        return windows_adjoint(dcols, self.padded, self.batched_shape, self.window).reshape(self.x_shape)


def max_pool2d(
    x: Tensor,
    kernel_size: Size2,
    stride: Size2 | None = None,
    padding: Size2 = 0,
    dilation: Size2 = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
) -> Tensor:
    """x [N, C, H, W] (or [C, H, W]) -> [N, C, OH, OW], the maximum of each window (stride defaults to
    kernel_size; output size in the module docstring). ``return_indices`` is not supported."""
    if return_indices:
        raise NotImplementedError("max_pool2d: not supported: return_indices=True")
    return MaxPool2dFunction.apply(x, window=make_window(kernel_size, stride, padding, dilation, ceil_mode))


def avg_pool2d(
    x: Tensor,
    kernel_size: Size2,
    stride: Size2 | None = None,
    padding: Size2 = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
) -> Tensor:
    """x [N, C, H, W] (or [C, H, W]) -> [N, C, OH, OW], the mean of each window (zero padding counts, as
    PyTorch's default; ``divisor_override`` replaces the window size)."""
    if divisor_override is not None and divisor_override < 1:
        raise ValueError(f"avg_pool2d: divisor_override must be >= 1, got {divisor_override}")
    window = make_window(kernel_size, stride, padding, 1, ceil_mode)
    return AvgPool2dFunction.apply(
        x, window=window, count_include_pad=count_include_pad, divisor_override=divisor_override
    )


def adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: cell i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


class AdaptiveAvgPool2dFunction(Function):
    """Average over an output-size grid of (possibly overlapping) windows; a loop over the output cells."""

    def forward(self, x, *, output_size):
        if x.ndim not in (3, 4):
            raise ValueError(
                f"adaptive_avg_pool2d: expected a 4-D input [N, C, H, W] or 3-D [C, H, W], got shape {x.shape}"
            )
        self.rows = adaptive_bounds(x.shape[-2], output_size[0])
        self.cols = adaptive_bounds(x.shape[-1], output_size[1])
        self.x_shape = x.shape
        out = np.empty(x.shape[:-2] + output_size, dtype=x.dtype)
        for a, (h0, h1) in enumerate(self.rows):
            for b, (w0, w1) in enumerate(self.cols):
                out[..., a, b] = x[..., h0:h1, w0:w1].mean(axis=(-2, -1))
        return out

    def backward(self, g):
        dx = np.zeros(self.x_shape, dtype=g.dtype)
        for a, (h0, h1) in enumerate(self.rows):
            for b, (w0, w1) in enumerate(self.cols):
                dx[..., h0:h1, w0:w1] += (g[..., a, b] / ((h1 - h0) * (w1 - w0)))[..., None, None]
        return dx


def adaptive_avg_pool2d(x: Tensor, output_size: Size2) -> Tensor:
    """x [N, C, H, W] -> [N, C, *output_size]; output_size=1 is global average pooling."""
    return AdaptiveAvgPool2dFunction.apply(x, output_size=pair(output_size, "output_size"))


class MaxPool2d(Module):
    """MaxPool2d(kernel_size, stride=None, padding=0, dilation=1, return_indices=False, ceil_mode=False)."""

    def __init__(
        self,
        kernel_size: Size2,
        stride: Size2 | None = None,
        padding: Size2 = 0,
        dilation: Size2 = 1,
        return_indices: bool = False,
        ceil_mode: bool = False,
    ):
        super().__init__()
        if return_indices:
            raise NotImplementedError("MaxPool2d: not supported: return_indices=True")
        self.window = make_window(kernel_size, stride, padding, dilation, ceil_mode)
        self.kernel_size, self.stride, self.padding, self.dilation, self.ceil_mode = self.window

    def forward(self, x: Tensor) -> Tensor:
        return MaxPool2dFunction.apply(x, window=self.window)

    def extra_repr(self) -> str:
        return (
            f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
            f"dilation={self.dilation}, ceil_mode={self.ceil_mode}"
        )


class AvgPool2d(Module):
    """AvgPool2d(kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True, divisor_override=None)."""

    def __init__(
        self,
        kernel_size: Size2,
        stride: Size2 | None = None,
        padding: Size2 = 0,
        ceil_mode: bool = False,
        count_include_pad: bool = True,
        divisor_override: int | None = None,
    ):
        super().__init__()
        self.window = make_window(kernel_size, stride, padding, 1, ceil_mode)
        self.kernel_size, self.stride, self.padding, _, self.ceil_mode = self.window
        self.count_include_pad, self.divisor_override = count_include_pad, divisor_override

    def forward(self, x: Tensor) -> Tensor:
        return avg_pool2d(x, *self.window[:3], self.ceil_mode, self.count_include_pad, self.divisor_override)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    """AdaptiveAvgPool2d(output_size): average pooling to a fixed output grid; 1 = global average pooling."""

    def __init__(self, output_size: Size2):
        super().__init__()
        self.output_size = pair(output_size, "output_size")

    def forward(self, x: Tensor) -> Tensor:
        return adaptive_avg_pool2d(x, self.output_size)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


def global_avg_pool2d(x: Tensor) -> Tensor:
    """[N, C, H, W] -> [N, C], the mean over H and W."""
    return adaptive_avg_pool2d(x, 1).reshape(x.shape[0], x.shape[1])


__all__ = [
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "MaxPool2d",
    "adaptive_avg_pool2d",
    "avg_pool2d",
    "global_avg_pool2d",
    "max_pool2d",
]
