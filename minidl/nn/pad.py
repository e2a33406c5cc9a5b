"""Padding of the two spatial dims of an NCHW tensor, with zeros or by reflection, and its adjoint.

    zeros:    x_pad[.., r, s] = x[.., r - top, s - left] inside, 0 outside
    reflect:  the border mirrors the image without repeating the edge pixel (PyTorch's and NumPy's
              "reflect"): for width W and left padding p, x_pad[.., k] = x[.., p - k] for k < p,
              and on the right x_pad[.., p + W + k] = x[.., W - 2 - k]

The backward is the adjoint: the centre of g, plus (reflect) each border strip of g folded back onto
the pixels it copied. Padding is separable (width after height), so the fold undoes the width first
on the full-height gradient, then the height.
"""

from __future__ import annotations

import numpy as np

from minidl.tensor import Function, Tensor

PADDING_MODES = ("zeros", "reflect")


def _fold_reflect(g: np.ndarray, before: int, after: int, axis: int) -> np.ndarray:
    """Adjoint of reflect padding along ``axis`` (a negative axis): g [.., size + before + after, ..] -> [.., size, ..]."""
    g = np.moveaxis(g, axis, -1)
    size = g.shape[-1] - before - after
    dx = g[..., before : before + size].copy()
    if before:
        dx[..., 1 : before + 1] += g[..., :before][..., ::-1]
    if after:
        dx[..., size - 1 - after : size - 1] += g[..., before + size :][..., ::-1]
    return np.moveaxis(dx, -1, axis)


class Pad2dFunction(Function):
    """x [N, C, H, W] -> [N, C, H + top + bottom, W + left + right]; a negative width crops that side
    (zeros mode only, as F.pad), so the adjoint puts the gradient back in place with zeros where it was cropped."""

    def forward(self, x, *, pad, mode):
        self.pad, self.mode, self.in_shape = pad, mode, x.shape
        top, bottom, left, right = (max(-p, 0) for p in pad)  # the crops
        x = x[:, :, top : x.shape[2] - bottom, left : x.shape[3] - right]
        widths = ((0, 0), (0, 0), *((max(a, 0), max(b, 0)) for a, b in (pad[:2], pad[2:])))
        return np.pad(x, widths) if mode == "zeros" else np.pad(x, widths, mode="reflect")

    def backward(self, g):
        top, bottom, left, right = self.pad
        if self.mode == "reflect":
            return _fold_reflect(_fold_reflect(g, left, right, -1), top, bottom, -2)
        h, w = self.in_shape[2] - max(-top, 0) - max(-bottom, 0), self.in_shape[3] - max(-left, 0) - max(-right, 0)
        inner = g[:, :, max(top, 0) : max(top, 0) + h, max(left, 0) : max(left, 0) + w]
        if min(self.pad) >= 0:
            return np.ascontiguousarray(inner)
        dx = np.zeros(self.in_shape, g.dtype)
        dx[:, :, max(-top, 0) : max(-top, 0) + h, max(-left, 0) : max(-left, 0) + w] = inner
        return dx


def pad2d(x: Tensor, pad: tuple[int, int, int, int], mode: str = "zeros") -> Tensor:
    """Pad x [N, C, H, W] by pad = (top, bottom, left, right) with zeros or by reflection (differentiable);
    with zeros a negative width crops that many rows or columns instead."""
    if mode not in PADDING_MODES:
        raise ValueError(f"not supported: padding_mode={mode!r} (supported: {', '.join(PADDING_MODES)})")
    if len(pad) != 4 or not all(isinstance(p, int | np.integer) for p in pad):
        raise ValueError(f"pad2d: pad must be 4 ints (top, bottom, left, right), got {pad}")
    if mode == "reflect" and min(pad) < 0:
        raise ValueError(f"pad2d: reflect padding must be non-negative, got {pad}")
    if x.ndim != 4:
        raise ValueError(f"pad2d: expected a 4-D input [N, C, H, W], got shape {x.shape}")
    h, w = x.shape[2:]
    if mode == "reflect" and (max(pad[:2]) >= h or max(pad[2:]) >= w):
        raise ValueError(f"pad2d: reflect padding {pad} must be smaller than the input's size {h}x{w}")
    if h + min(pad[0], 0) + min(pad[1], 0) < 0 or w + min(pad[2], 0) + min(pad[3], 0) < 0:
        raise ValueError(f"pad2d: negative padding {pad} crops more than the input's size {h}x{w}")
    return Pad2dFunction.apply(x, pad=tuple(int(p) for p in pad), mode=mode)


def same_padding(kernel: tuple[int, int], dilation: tuple[int, int]) -> tuple[int, int, int, int]:
    """padding="same" at stride 1: the window spans d*(k-1) + 1, so d*(k-1) pixels in all, the odd one
    (when there is one) at the end, as PyTorch: (top, bottom, left, right)."""
    th, tw = (d * (k - 1) for k, d in zip(kernel, dilation))
    return th // 2, th - th // 2, tw // 2, tw - tw // 2
