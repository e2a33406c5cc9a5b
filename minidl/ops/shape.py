"""Shape ops: they move values around; backward moves gradients back."""

from __future__ import annotations

import numpy as np

from minidl.ops.elementwise import broadcasts_to
from minidl.ops.reduce import normalize_axis
from minidl.tensor import Function, unbroadcast


class Reshape(Function):
    def forward(self, a, shape):
        self.in_shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {a.shape} into {tuple(shape)}") from None

    def backward(self, g):
        return g.reshape(self.in_shape)


class Transpose(Function):
    """Permute axes; ``axes=None`` reverses them (``.T``)."""

    def forward(self, a, axes=None):
        if axes is None:
            axes = tuple(reversed(range(a.ndim)))
        if sorted(int(x) % max(a.ndim, 1) for x in axes) != list(range(a.ndim)):
            raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of {a.ndim} dimensions")
        self.axes = tuple(int(x) % max(a.ndim, 1) for x in axes)
        return a.transpose(self.axes)

    def backward(self, g):
        return g.transpose(np.argsort(self.axes))


def is_basic_index(index) -> bool:
    """Whether ``index`` uses only basic indexing (ints, slices, None, Ellipsis): then it selects each element
    at most once and the result is a view."""
    parts = index if isinstance(index, tuple) else (index,)
    return all(isinstance(i, int | np.integer | slice) or i is None or i is Ellipsis for i in parts)


class GetItem(Function):
    """Indexing: basic slices, integer arrays (repeated indices accumulate), boolean masks."""

    def forward(self, a, index):
        self.in_shape, self.dtype, self.index = a.shape, a.dtype, index
        try:
            return a[index]
        except IndexError as e:
            raise IndexError(f"getitem: index {index!r} is invalid for a tensor of shape {a.shape}: {e}") from None

    def backward(self, g):
        out = np.zeros(self.in_shape, g.dtype)
        if is_basic_index(self.index):
            out[self.index] = g  # each element picked at most once
        else:
            np.add.at(out, self.index, g)  # unbuffered: a repeated index gets every contribution
        return out


class Expand(Function):
    """broadcast_to(a, shape): NumPy broadcasting made explicit; -1 keeps a size. Backward sums the
    stretched and prepended axes (``unbroadcast``)."""

    def forward(self, a, shape):
        shape = tuple(int(n) for n in shape)
        lead = len(shape) - a.ndim
        if lead >= 0:
            shape = tuple(a.shape[i - lead] if n == -1 and i >= lead else n for i, n in enumerate(shape))
        if lead < 0 or not broadcasts_to(a.shape, shape):
            raise ValueError(f"expand: cannot broadcast a tensor of shape {a.shape} to shape {shape}")
        self.in_shape = a.shape
        return np.broadcast_to(a, shape)

    def backward(self, g):
        return unbroadcast(g, self.in_shape)


def _check_same_except(op: str, arrays, axis: int | None) -> None:
    """All arrays have the same rank and the same sizes, except along ``axis`` (None: everywhere)."""
    first = arrays[0].shape
    for arr in arrays[1:]:
        s = arr.shape
        same = len(s) == len(first) and all(n == m for i, (n, m) in enumerate(zip(s, first)) if i != axis)
        if not same:
            where = "" if axis is None else f" outside axis {axis}"
            raise ValueError(f"{op}: shapes {first} and {s} differ{where}")


class Concatenate(Function):
    """Join along an existing axis; backward cuts the gradient at the same offsets."""

    def forward(self, *arrays, axis=0):
        if not arrays:
            raise ValueError("concatenate: need at least one tensor")
        if arrays[0].ndim == 0:
            raise ValueError("concatenate: zero-dimensional tensors cannot be concatenated (use stack)")
        axis = normalize_axis(axis, arrays[0].ndim)[0]
        _check_same_except("concatenate", arrays, axis)
        self.axis = axis
        self.offsets = np.cumsum([arr.shape[axis] for arr in arrays])[:-1]
        return np.concatenate(arrays, axis=axis)

    def backward(self, g):
        return tuple(np.split(g, self.offsets, axis=self.axis))


class Stack(Function):
    """Join along a new axis; backward takes the slices of the gradient along it."""

    def forward(self, *arrays, axis=0):
        if not arrays:
            raise ValueError("stack: need at least one tensor")
        _check_same_except("stack", arrays, None)
        self.axis = normalize_axis(axis, arrays[0].ndim + 1)[0]
        return np.stack(arrays, axis=self.axis)

    def backward(self, g):
        return tuple(np.moveaxis(g, self.axis, 0))


class Split(Function):
    """NumPy's ``split``: ``sections`` is a number of equal parts or a list of cut indices.
    A multi-output Function; backward concatenates the parts' gradients."""

    def forward(self, a, sections, axis=0):
        if a.ndim == 0:
            raise ValueError("split: a zero-dimensional tensor cannot be split")
        self.axis = normalize_axis(axis, a.ndim)[0]
        try:
            return tuple(np.split(a, sections, axis=self.axis))
        except ValueError:
            raise ValueError(
                f"split: axis {self.axis} of size {a.shape[self.axis]} (shape {a.shape}) "
                f"does not divide into {sections} equal parts"
            ) from None

    def backward(self, *gs):
        return np.concatenate(gs, axis=self.axis)


def pad_widths(pad_width, ndim: int) -> tuple[tuple[int, int], ...]:
    """NumPy's pad_width forms (n, (before, after), or one pair per axis) -> one (before, after) per axis."""
    arr = np.asarray(pad_width)
    if arr.dtype.kind not in "iu" or arr.ndim > 2:
        raise ValueError(f"pad: pad_width must be integers: n, (before, after) or one pair per axis, got {pad_width}")
    try:
        pairs = np.broadcast_to(arr, (ndim, 2))
    except ValueError:
        raise ValueError(f"pad: pad_width {pad_width} does not fit a tensor with {ndim} dimensions") from None
    if (pairs < 0).any():
        raise ValueError(f"pad: pad_width must be non-negative, got {pad_width}")
    return tuple((int(b), int(e)) for b, e in pairs)


class Pad(Function):
    """Constant padding with NumPy's ``pad_width`` convention (pairs in axis order, not PyTorch's
    reversed one); backward slices the padding off the gradient."""

    def forward(self, a, pad_width, value=0.0):
        self.widths = pad_widths(pad_width, a.ndim)
        self.in_shape = a.shape
        return np.pad(a, self.widths, mode="constant", constant_values=value)

    def backward(self, g):
        return g[tuple(slice(b, b + n) for (b, _), n in zip(self.widths, self.in_shape))]
