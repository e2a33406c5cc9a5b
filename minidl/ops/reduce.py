"""Reductions over axes (int, tuple or None), with keepdims."""

from __future__ import annotations

import numpy as np

from minidl.tensor import Function


def normalize_axis(axis, ndim: int) -> tuple[int, ...]:
    """Axis argument -> sorted tuple of non-negative axes (None means all)."""
    if axis is None:
        return tuple(range(ndim))
    axes = (axis,) if isinstance(axis, int | np.integer) else tuple(axis)
    out = []
    for ax in axes:
        if not -ndim <= ax < max(ndim, 1):
            raise ValueError(f"axis {ax} is out of range for a tensor with {ndim} dimensions")
        out.append(int(ax) % max(ndim, 1))
    return tuple(sorted(set(out)))


def expand_reduced(g: np.ndarray, in_shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    """Re-insert the reduced axes of ``g`` (if dropped) so it broadcasts against the input."""
    if not keepdims:
        for ax in axes:
            g = np.expand_dims(g, ax)
    return np.broadcast_to(g, in_shape)


class Sum(Function):
    def forward(self, a, axis=None, keepdims=False):
        self.axes = normalize_axis(axis, a.ndim)
        self.in_shape, self.keepdims = a.shape, keepdims
        return np.asarray(a.sum(axis=self.axes, keepdims=keepdims))

    def backward(self, g):
        return np.array(expand_reduced(g, self.in_shape, self.axes, self.keepdims))
