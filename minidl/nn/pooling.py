"""Pooling over sliding windows, NCHW, built on im2col: max, average, adaptive average.

With cols = im2col(x) of shape [N, C, kh, kw, OH, OW], a pooling layer reduces over the
window axes (kh, kw):
    max:      out = max over the window;  the gradient goes to the (first) arg max of each window
    average:  out = mean over the window; each element of the window gets dout / (kh * kw)
and col2im adds the window gradients back to the pixels (overlapping windows sum).
"""

from __future__ import annotations

import numpy as np

from minidl.nn.im2col import col2im, im2col, pair
from minidl.nn.module import Module
from minidl.tensor import Function, Tensor

Size2 = int | tuple[int, int]


def _window(kernel_size: Size2, stride: Size2 | None, padding: Size2) -> dict:
    k = pair(kernel_size, "kernel_size")
    s = k if stride is None else pair(stride, "stride")
    p = pair(padding, "padding")
    if p[0] > k[0] // 2 or p[1] > k[1] // 2:
        raise ValueError(f"pooling: padding {p} must be at most half the kernel size {k}")
    return {"kernel": k, "stride": s, "padding": p}


class MaxPool2dFunction(Function):
    def forward(self, x, *, kernel, stride, padding):
        cols = im2col(x, kernel, stride, padding, pad_value=-np.inf)
        n, c, kh, kw, oh, ow = cols.shape
        cols = cols.reshape(n, c, kh * kw, oh, ow)
        # argmax picks the first maximum in row-major window order, as PyTorch's CPU kernel does.
        self.argmax = cols.argmax(axis=2)[:, :, None]
        self.x_shape, self.stride, self.padding, self.kernel = x.shape, stride, padding, kernel
        return np.take_along_axis(cols, self.argmax, axis=2)[:, :, 0]

    def backward(self, g):
        n, c, oh, ow = g.shape
        kh, kw = self.kernel
        dcols = np.zeros((n, c, kh * kw, oh, ow), dtype=g.dtype)
        np.put_along_axis(dcols, self.argmax, g[:, :, None], axis=2)
        return col2im(dcols.reshape(n, c, kh, kw, oh, ow), self.x_shape, self.stride, self.padding)


class AvgPool2dFunction(Function):
    """out = sum over the window / divisor; divisor = kh*kw, or (count_include_pad=False) the
    number of non-padding pixels in the window."""

    def forward(self, x, *, kernel, stride, padding, count_include_pad=True):
        cols = im2col(x, kernel, stride, padding)
        if count_include_pad:
            divisor = np.asarray(kernel[0] * kernel[1], dtype=x.dtype)
        else:
            ones = np.ones((1, 1) + x.shape[2:], dtype=x.dtype)
            divisor = im2col(ones, kernel, stride, padding).sum(axis=(2, 3))
        self.divisor, self.x_shape, self.stride, self.padding, self.kernel = divisor, x.shape, stride, padding, kernel
        return cols.sum(axis=(2, 3)) / divisor

    def backward(self, g):
        n, c, oh, ow = g.shape
        kh, kw = self.kernel
        share = (g / self.divisor)[:, :, None, None]
        dcols = np.broadcast_to(share, (n, c, kh, kw, oh, ow))
        return col2im(dcols, self.x_shape, self.stride, self.padding)


def max_pool2d(x: Tensor, kernel_size: Size2, stride: Size2 | None = None, padding: Size2 = 0) -> Tensor:
    """x [N, C, H, W] -> [N, C, OH, OW], the maximum of each window (stride defaults to kernel_size)."""
    return MaxPool2dFunction.apply(x, **_window(kernel_size, stride, padding))


def avg_pool2d(
    x: Tensor, kernel_size: Size2, stride: Size2 | None = None, padding: Size2 = 0, count_include_pad: bool = True
) -> Tensor:
    """x [N, C, H, W] -> [N, C, OH, OW], the mean of each window (zero padding counts, as PyTorch's default)."""
    return AvgPool2dFunction.apply(x, count_include_pad=count_include_pad, **_window(kernel_size, stride, padding))


def adaptive_bounds(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive windows: cell i covers [floor(i*size/out), ceil((i+1)*size/out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


class AdaptiveAvgPool2dFunction(Function):
    """Average over an output-size grid of (possibly overlapping) windows; a loop over the output cells."""

    def forward(self, x, *, output_size):
        if x.ndim != 4:
            raise ValueError(f"adaptive_avg_pool2d: expected a 4-D input [N, C, H, W], got shape {x.shape}")
        self.rows = adaptive_bounds(x.shape[2], output_size[0])
        self.cols = adaptive_bounds(x.shape[3], output_size[1])
        self.x_shape = x.shape
        out = np.empty(x.shape[:2] + output_size, dtype=x.dtype)
        for a, (h0, h1) in enumerate(self.rows):
            for b, (w0, w1) in enumerate(self.cols):
                out[:, :, a, b] = x[:, :, h0:h1, w0:w1].mean(axis=(2, 3))
        return out

    def backward(self, g):
        dx = np.zeros(self.x_shape, dtype=g.dtype)
        for a, (h0, h1) in enumerate(self.rows):
            for b, (w0, w1) in enumerate(self.cols):
                dx[:, :, h0:h1, w0:w1] += (g[:, :, a, b] / ((h1 - h0) * (w1 - w0)))[:, :, None, None]
        return dx


def adaptive_avg_pool2d(x: Tensor, output_size: Size2) -> Tensor:
    """x [N, C, H, W] -> [N, C, *output_size]; output_size=1 is global average pooling."""
    return AdaptiveAvgPool2dFunction.apply(x, output_size=pair(output_size, "output_size"))


class MaxPool2d(Module):
    def __init__(self, kernel_size: Size2, stride: Size2 | None = None, padding: Size2 = 0):
        super().__init__()
        self.window = _window(kernel_size, stride, padding)
        self.kernel_size, self.stride, self.padding = (self.window[k] for k in ("kernel", "stride", "padding"))

    def forward(self, x: Tensor) -> Tensor:
        return MaxPool2dFunction.apply(x, **self.window)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(MaxPool2d):
    def __init__(
        self, kernel_size: Size2, stride: Size2 | None = None, padding: Size2 = 0, count_include_pad: bool = True
    ):
        super().__init__(kernel_size, stride, padding)
        self.count_include_pad = count_include_pad

    def forward(self, x: Tensor) -> Tensor:
        return AvgPool2dFunction.apply(x, count_include_pad=self.count_include_pad, **self.window)


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
