"""The primitive differentiable ops, and the Tensor methods and operators that call them.

Each op is a ``Function`` subclass with forward and backward side by side; the files
group them by family (elementwise, reductions, shape, linear algebra).
"""

from __future__ import annotations

import numbers

import numpy as np

from minidl.ops.elementwise import (
    Add,
    Cast,
    Div,
    Exp,
    Log,
    Mul,
    Neg,
    Pow,
    ReLU,
    Sigmoid,
    Sub,
    Tanh,
)
from minidl.ops.linalg import MatMul
from minidl.ops.reduce import Sum, normalize_axis
from minidl.ops.shape import GetItem, Reshape, Transpose
from minidl.tensor import Tensor

__all__ = [
    "Add", "Cast", "Div", "Exp", "GetItem", "Log", "MatMul", "Mul", "Neg", "Pow", "ReLU",
    "Reshape", "Sigmoid", "Sub", "Sum", "Tanh", "Transpose",
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


def _mean(self: Tensor, axis=None, keepdims: bool = False) -> Tensor:
    axes = normalize_axis(axis, self.ndim)
    n = int(np.prod([self.shape[a] for a in axes])) if axes else 1
    return Sum.apply(self, axis=axes, keepdims=keepdims) * (1.0 / max(n, 1))


def _reshape(self: Tensor, *shape) -> Tensor:
    return Reshape.apply(self, shape=_shape_arg(shape))


def _transpose(self: Tensor, *axes) -> Tensor:
    return Transpose.apply(self, axes=_shape_arg(axes) if axes else None)


Tensor.sum = _sum
Tensor.mean = _mean
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
