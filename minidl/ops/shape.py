"""Shape ops: they move values around (reshape, transpose, index, expand, join, split, pad, flip, tril/triu);
backward moves gradients back."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minidl.autograd import Function, unbroadcast
from minidl.ops.elementwise import broadcasts_to
from minidl.ops.reduce import normalize_axis
from minidl.tensor import Tensor


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


class Flip(Function):
    """Reverse the order along ``axes`` (None: all); its own adjoint."""

    def forward(self, a, axes=None):
        self.axes = None if axes is None else normalize_axis(axes, a.ndim)
        return np.flip(a, self.axes)

    def backward(self, g):
        return np.flip(g, self.axes)


class Triangle(Function):
    """tril/triu over the last two axes: keep the entries on and below (tril) or above (triu) diagonal k,
    zero the rest; the gradient is masked the same way."""

    def forward(self, a, k=0, upper=False):
        if a.ndim < 2:
            raise ValueError(f"{'triu' if upper else 'tril'}: need at least 2 dimensions, got shape {a.shape}")
        self.k, self.fn = int(k), np.triu if upper else np.tril
        return self.fn(a, self.k)

    def backward(self, g):
        return self.fn(g, self.k)


# ---- functional forms (also the bodies of the Tensor methods)
def shape_arg(shape: Sequence[Any]) -> tuple[int, ...]:
    """``f(2, 3)`` and ``f((2, 3))`` both mean the shape (2, 3)."""
    if len(shape) == 1 and not isinstance(shape[0], int | np.integer):
        return tuple(shape[0])
    return tuple(shape)


def index_arg(idx: Any) -> Any:
    """Tensors inside an index become their ndarrays."""
    if isinstance(idx, Tensor):
        return idx.data
    if isinstance(idx, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in idx)
    return idx


def reshape(x: Any, *shape: Any) -> Tensor:
    return Reshape.apply(x, shape=shape_arg(shape))


def transpose(x: Any, *axes: Any) -> Tensor:
    """Permute the axes (NumPy's transpose: all of them, in the order given; none given reverses them)."""
    return Transpose.apply(x, axes=shape_arg(axes) if axes else None)


def squeeze(x: Tensor, axis: Any = None) -> Tensor:
    """Drop size-1 axes (all of them, or those named; naming an axis of another size is an error)."""
    axes = [a for a, n in enumerate(x.shape) if n == 1] if axis is None else normalize_axis(axis, x.ndim)
    for a in axes:
        if x.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of a tensor of shape {x.shape} has size {x.shape[a]}, not 1")
    return Reshape.apply(x, shape=tuple(n for a, n in enumerate(x.shape) if a not in axes))


def unsqueeze(x: Tensor, axis: int) -> Tensor:
    """Insert a size-1 axis at position ``axis`` of the result."""
    if not -x.ndim - 1 <= axis <= x.ndim:
        raise ValueError(f"unsqueeze: axis {axis} is out of range for a result with {x.ndim + 1} dimensions")
    axis = axis % (x.ndim + 1)
    return Reshape.apply(x, shape=x.shape[:axis] + (1,) + x.shape[axis:])


def flatten(x: Tensor, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes start_axis..end_axis (inclusive) into one, as torch.flatten."""
    if x.ndim == 0:
        return Reshape.apply(x, shape=(1,))
    start, end = normalize_axis(start_axis, x.ndim)[0], normalize_axis(end_axis, x.ndim)[0]
    if start > end:
        raise ValueError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis} for shape {x.shape}")
    merged = int(np.prod(x.shape[start : end + 1]))
    return Reshape.apply(x, shape=x.shape[:start] + (merged,) + x.shape[end + 1 :])


def broadcast_to(x: Any, *shape: Any) -> Tensor:
    return Expand.apply(x, shape=shape_arg(shape))


def concatenate(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors along an existing axis (np.concatenate); sizes must agree on every other axis."""
    return Concatenate.apply(*tensors, axis=axis)


cat = concatenate


def stack(tensors: Sequence[Any], axis: int = 0) -> Tensor:
    """Join tensors of one shape along a new axis (np.stack)."""
    return Stack.apply(*tensors, axis=axis)


def split(x: Any, sections: int | Sequence[int], axis: int = 0) -> tuple[Tensor, ...]:
    """NumPy's split, not PyTorch's: ``sections`` is the NUMBER of equal parts, or a list of cut indices."""
    return Split.apply(x, sections=sections, axis=axis)


def pad(x: Any, pad_width: Any, value: float = 0.0) -> Tensor:
    """Constant padding, NumPy's ``pad_width`` convention: n, (before, after), or one pair per axis in axis order."""
    return Pad.apply(x, pad_width=pad_width, value=value)


def flip(x: Any, axis: Any = None) -> Tensor:
    """Reverse along ``axis`` (an int, a tuple, or None for all), as np.flip / torch.flip."""
    return Flip.apply(x, axes=axis)


def tril(x: Any, k: int = 0) -> Tensor:
    """Lower triangle of the last two axes, from diagonal k down (torch.tril's ``diagonal``)."""
    return Triangle.apply(x, k=k, upper=False)


def triu(x: Any, k: int = 0) -> Tensor:
    """Upper triangle of the last two axes, from diagonal k up."""
    return Triangle.apply(x, k=k, upper=True)
