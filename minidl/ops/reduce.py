"""Reductions over axes (int, tuple or None), with keepdims."""

from __future__ import annotations

import warnings

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


class Mean(Function):
    """Mean over axes; d mean / da = 1/n for each of the n reduced elements (NaN over zero elements, as NumPy)."""

    def forward(self, a, axis=None, keepdims=False):
        self.axes = normalize_axis(axis, a.ndim)
        self.in_shape, self.keepdims = a.shape, keepdims
        self.n = int(np.prod([a.shape[ax] for ax in self.axes]))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # "mean of empty slice": NaN, as NumPy
            return np.asarray(a.mean(axis=self.axes, keepdims=keepdims))

    def backward(self, g):
        return np.array(expand_reduced(g, self.in_shape, self.axes, self.keepdims)) / max(self.n, 1)


class _Extremum(Function):
    """max/min over axes. The gradient flows to the elements equal to the result; when several tie,
    it is split evenly among them (as PyTorch's ``amax``/``amin``), so it always sums to g."""

    name = ""
    reduce = staticmethod(np.max)

    def forward(self, a, axis=None, keepdims=False):
        self.axes = normalize_axis(axis, a.ndim)
        if any(a.shape[ax] == 0 for ax in self.axes):
            raise ValueError(f"{self.name}: cannot reduce a tensor of shape {a.shape} over an empty axis {self.axes}")
        self.keepdims = keepdims
        out = np.asarray(self.reduce(a, axis=self.axes, keepdims=True))
        self.save_for_backward(a, out)
        return out if keepdims else out.reshape(tuple(n for i, n in enumerate(a.shape) if i not in self.axes))

    def backward(self, g):
        a, out = self.saved_tensors
        hit = a == out
        count = hit.sum(axis=self.axes, keepdims=True)
        return hit * (expand_reduced(g, out.shape, self.axes, self.keepdims) / count).astype(g.dtype, copy=False)


class Max(_Extremum):
    name, reduce = "max", staticmethod(np.max)


class Min(_Extremum):
    name, reduce = "min", staticmethod(np.min)
