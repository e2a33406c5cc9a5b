"""The primitive differentiable ops, and the Tensor methods, operators and module-level functions that call them.

Each op is a ``Function`` subclass with forward and backward side by side; the files
group them by family (elementwise, reductions, shape, softmax, losses, linear algebra).
"""

from __future__ import annotations

import numbers
from collections.abc import Sequence
from typing import Any

import numpy as np

from minidl.ops.elementwise import (
    Abs,
    Add,
    Cast,
    Clip,
    Div,
    Exp,
    Log,
    Maximum,
    Minimum,
    Mul,
    Neg,
    Pow,
    ReLU,
    Sigmoid,
    Sub,
    Tanh,
    Where,
)
from minidl.ops.linalg import MatMul
from minidl.ops.loss import BinaryCrossEntropyWithLogits, CrossEntropy
from minidl.ops.reduce import Max, Mean, Min, Sum, normalize_axis
from minidl.ops.shape import Concatenate, Expand, GetItem, Pad, Reshape, Split, Stack, Transpose
from minidl.ops.softmax import LogSoftmax, LogSumExp, Softmax
from minidl.tensor import Tensor, get_default_dtype

__all__ = [
    "Abs",
    "Add",
    "BinaryCrossEntropyWithLogits",
    "Cast",
    "Clip",
    "Concatenate",
    "CrossEntropy",
    "Div",
    "Exp",
    "Expand",
    "GetItem",
    "Log",
    "LogSoftmax",
    "LogSumExp",
    "MatMul",
    "Max",
    "Maximum",
    "Mean",
    "Min",
    "Minimum",
    "Mul",
    "Neg",
    "Pad",
    "Pow",
    "ReLU",
    "Reshape",
    "Sigmoid",
    "Softmax",
    "Split",
    "Stack",
    "Sub",
    "Sum",
    "Tanh",
    "Transpose",
    "Where",
    "abs",
    "broadcast_to",
    "cat",
    "clip",
    "concatenate",
    "log_softmax",
    "logsumexp",
    "maximum",
    "minimum",
    "pad",
    "softmax",
    "split",
    "stack",
    "where",
]


def operand(self: Tensor, other) -> Tensor | np.ndarray:
    """Python and NumPy scalars take the tensor's dtype (so float32 * 2 stays float32)."""
    if isinstance(other, Tensor):
        return other
    if isinstance(other, numbers.Number) and self.dtype.kind == "f":
        return np.asarray(other, dtype=self.dtype)
    return np.asarray(other)


def _shape_arg(shape) -> tuple[int, ...]:
    if len(shape) == 1 and not isinstance(shape[0], int | np.integer):
        return tuple(shape[0])
    return tuple(shape)


# ---- operators
Tensor.__add__ = lambda a, b: Add.apply(a, operand(a, b))
Tensor.__radd__ = lambda a, b: Add.apply(operand(a, b), a)
Tensor.__sub__ = lambda a, b: Sub.apply(a, operand(a, b))
Tensor.__rsub__ = lambda a, b: Sub.apply(operand(a, b), a)
Tensor.__mul__ = lambda a, b: Mul.apply(a, operand(a, b))
Tensor.__rmul__ = lambda a, b: Mul.apply(operand(a, b), a)
Tensor.__truediv__ = lambda a, b: Div.apply(a, operand(a, b))
Tensor.__rtruediv__ = lambda a, b: Div.apply(operand(a, b), a)
Tensor.__pow__ = lambda a, b: Pow.apply(a, operand(a, b))
Tensor.__rpow__ = lambda a, b: Pow.apply(operand(a, b), a)
Tensor.__neg__ = lambda a: Neg.apply(a)
Tensor.__matmul__ = lambda a, b: MatMul.apply(a, operand(a, b))
Tensor.__rmatmul__ = lambda a, b: MatMul.apply(operand(a, b), a)
Tensor.__getitem__ = lambda a, idx: GetItem.apply(a, index=_index_arg(idx))


def _index_arg(idx):
    """Tensors inside an index become their ndarrays."""
    if isinstance(idx, Tensor):
        return idx.data
    if isinstance(idx, tuple):
        return tuple(i.data if isinstance(i, Tensor) else i for i in idx)
    return idx


# ---- methods
def _sum(self: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    return Sum.apply(self, axis=axis, keepdims=keepdims)


def _reshape(self: Tensor, *shape) -> Tensor:
    return Reshape.apply(self, shape=_shape_arg(shape))


def _transpose(self: Tensor, *axes) -> Tensor:
    return Transpose.apply(self, axes=_shape_arg(axes) if axes else None)


Tensor.sum = _sum
Tensor.mean = lambda self, axis=None, keepdims=False: Mean.apply(self, axis=axis, keepdims=keepdims)
Tensor.reshape = _reshape
Tensor.view = _reshape
Tensor.transpose = _transpose
Tensor.permute = _transpose
Tensor.T = property(lambda self: Transpose.apply(self))
Tensor.exp = lambda self: Exp.apply(self)
Tensor.log = lambda self: Log.apply(self)
Tensor.tanh = lambda self: Tanh.apply(self)
Tensor.sigmoid = lambda self: Sigmoid.apply(self)
Tensor.relu = lambda self: ReLU.apply(self)


# ---- more methods
def _expand(self: Tensor, *shape) -> Tensor:
    return Expand.apply(self, shape=_shape_arg(shape))


def _squeeze(self: Tensor, axis=None) -> Tensor:
    """Drop size-1 axes (all of them, or those named; naming an axis of another size is an error)."""
    axes = [a for a, n in enumerate(self.shape) if n == 1] if axis is None else normalize_axis(axis, self.ndim)
    for a in axes:
        if self.shape[a] != 1:
            raise ValueError(f"squeeze: axis {a} of a tensor of shape {self.shape} has size {self.shape[a]}, not 1")
    return Reshape.apply(self, shape=tuple(n for a, n in enumerate(self.shape) if a not in axes))


def _unsqueeze(self: Tensor, axis: int) -> Tensor:
    """Insert a size-1 axis at position ``axis`` of the result."""
    if not -self.ndim - 1 <= axis <= self.ndim:
        raise ValueError(f"unsqueeze: axis {axis} is out of range for a result with {self.ndim + 1} dimensions")
    axis = axis % (self.ndim + 1)
    return Reshape.apply(self, shape=self.shape[:axis] + (1,) + self.shape[axis:])


def _flatten(self: Tensor, start_axis: int = 0, end_axis: int = -1) -> Tensor:
    """Merge axes start_axis..end_axis (inclusive) into one, as torch.flatten."""
    if self.ndim == 0:
        return Reshape.apply(self, shape=(1,))
    start, end = normalize_axis(start_axis, self.ndim)[0], normalize_axis(end_axis, self.ndim)[0]
    if start > end:
        raise ValueError(f"flatten: start_axis {start_axis} comes after end_axis {end_axis} for shape {self.shape}")
    merged = int(np.prod(self.shape[start : end + 1]))
    return Reshape.apply(self, shape=self.shape[:start] + (merged,) + self.shape[end + 1 :])


Tensor.max = lambda self, axis=None, keepdims=False: Max.apply(self, axis=axis, keepdims=keepdims)
Tensor.min = lambda self, axis=None, keepdims=False: Min.apply(self, axis=axis, keepdims=keepdims)
Tensor.abs = lambda self: Abs.apply(self)
Tensor.__abs__ = lambda self: Abs.apply(self)
Tensor.clip = lambda self, lo=None, hi=None: clip(self, lo, hi)
Tensor.expand = _expand
Tensor.broadcast_to = _expand
Tensor.softmax = lambda self, axis=-1: Softmax.apply(self, axis=axis)
Tensor.log_softmax = lambda self, axis=-1: LogSoftmax.apply(self, axis=axis)
Tensor.logsumexp = lambda self, axis=None, keepdims=False: LogSumExp.apply(self, axis=axis, keepdims=keepdims)
Tensor.split = lambda self, sections, axis=0: Split.apply(self, sections=sections, axis=axis)
Tensor.squeeze = _squeeze
Tensor.unsqueeze = _unsqueeze
Tensor.flatten = _flatten
# Non-differentiable: integer or boolean results, no graph.
Tensor.argmax = lambda self, axis=None: Tensor(np.argmax(self.data, axis=axis))
Tensor.argmin = lambda self, axis=None: Tensor(np.argmin(self.data, axis=axis))
Tensor.__lt__ = lambda a, b: Tensor(a.data < _plain(b))
Tensor.__le__ = lambda a, b: Tensor(a.data <= _plain(b))
Tensor.__gt__ = lambda a, b: Tensor(a.data > _plain(b))
Tensor.__ge__ = lambda a, b: Tensor(a.data >= _plain(b))


def _plain(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


# ---- module-level functions (minidl.concatenate, minidl.where, ...)
def _operands(*xs: Any) -> list[Any]:
    """Tensors stay; Python numbers take the dtype of the first float Tensor among ``xs`` (else the default
    dtype), so ``where(c, x32, 0.0)`` stays float32; arrays keep theirs (NumPy promotion applies)."""
    dtype = next((x.dtype for x in xs if isinstance(x, Tensor) and x.dtype.kind == "f"), get_default_dtype())
    return [np.asarray(x, dtype) if isinstance(x, numbers.Number) and not isinstance(x, bool) else x for x in xs]


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


def where(cond: Any, x: Any, y: Any) -> Tensor:
    """x where cond else y, all broadcast; gradients flow to x and y, none to cond."""
    x, y = _operands(x, y)
    return Where.apply(np.asarray(_plain(cond), bool), x, y)


def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise max; on ties each input gets half the gradient (as PyTorch)."""
    return Maximum.apply(*_operands(a, b))


def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise min; on ties each input gets half the gradient (as PyTorch)."""
    return Minimum.apply(*_operands(a, b))


def clip(x: Any, lo: Any = None, hi: Any = None) -> Tensor:
    """Clamp to [lo, hi] (scalars or arrays broadcasting to x; None = no bound); gradient 1 inside, bounds
    included, 0 outside."""
    return Clip.apply(x, lo=_plain(lo), hi=_plain(hi))


def abs(x: Any) -> Tensor:  # noqa: A001 - the NumPy name
    return Abs.apply(x)


def pad(x: Any, pad_width: Any, value: float = 0.0) -> Tensor:
    """Constant padding, NumPy's ``pad_width`` convention: n, (before, after), or one pair per axis in axis order."""
    return Pad.apply(x, pad_width=pad_width, value=value)


def broadcast_to(x: Any, shape: Sequence[int]) -> Tensor:
    return Expand.apply(x, shape=tuple(shape))


def softmax(x: Any, axis: int | Sequence[int] = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed as exp(x - max) so +-1e4 inputs are fine."""
    return Softmax.apply(x, axis=axis)


def log_softmax(x: Any, axis: int | Sequence[int] = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``; stable."""
    return LogSoftmax.apply(x, axis=axis)


def logsumexp(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over ``axis`` (None: all), a reduction like sum; stable."""
    return LogSumExp.apply(x, axis=axis, keepdims=keepdims)
