"""Elementwise arithmetic (+ - * / ** and casts). Binary ops broadcast as NumPy does; backward sums the gradient
back to each input's shape with ``unbroadcast``. One-input math is in unary.py, activations in activation.py,
max/min/where/clamp in select.py."""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

from minidl.autograd import Function, unbroadcast
from minidl.tensor import Tensor, get_default_dtype


def check_broadcast(op: str, a: np.ndarray, b: np.ndarray) -> None:
    """Raise a ValueError naming the op and both shapes when they do not broadcast."""
    if a.shape == b.shape or not a.shape or not b.shape:
        return  # the common cases, without np.broadcast_shapes' few microseconds
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None


def broadcasts_to(shape: tuple[int, ...], target: tuple[int, ...]) -> bool:
    """Whether an array of ``shape`` broadcasts to exactly ``target``."""
    try:
        return np.broadcast_shapes(shape, target) == tuple(target)
    except ValueError:
        return False


class Add(Function):
    def forward(self, a, b):
        check_broadcast("add", a, b)
        self.shapes = a.shape, b.shape
        return a + b

    def backward(self, g):
        sa, sb = self.shapes
        return unbroadcast(g, sa), unbroadcast(g, sb)


class Sub(Function):
    def forward(self, a, b):
        check_broadcast("sub", a, b)
        self.shapes = a.shape, b.shape
        return a - b

    def backward(self, g):
        sa, sb = self.shapes
        return unbroadcast(g, sa), unbroadcast(-g, sb)


class Mul(Function):
    def forward(self, a, b):
        check_broadcast("mul", a, b)
        self.save_for_backward(a, b)
        return a * b

    def backward(self, g):
        a, b = self.saved_tensors
        ga = unbroadcast(g * b, a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * a, b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Div(Function):
    def forward(self, a, b):
        check_broadcast("div", a, b)
        self.save_for_backward(a, b)
        return a / b

    def backward(self, g):
        a, b = self.saved_tensors
        ga = unbroadcast(g / b, a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(-g * a / (b * b), b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Neg(Function):
    def forward(self, a):
        return -a

    def backward(self, g):
        return -g


class Cast(Function):
    def forward(self, a, dtype):
        self.in_dtype = a.dtype
        return a.astype(dtype)

    def backward(self, g):
        return g.astype(self.in_dtype)


class Pow(Function):
    """a ** b;  da = b a^(b-1) (0 where b = 0, also at a = 0),  db = a^b log(a)  (db only where a > 0)."""

    def forward(self, a, b):
        check_broadcast("pow", a, b)
        out = a**b
        self.save_for_backward(a, b, out)
        return out

    def backward(self, g):
        a, b, out = self.saved_tensors
        ga = gb = None
        if self.needs_input_grad[0]:
            with np.errstate(divide="ignore", invalid="ignore"):  # 0 ** -1 at b = 0 is masked out below
                da = np.where(b == 0, 0, b * a ** (b - 1))
            ga = unbroadcast(g * da, a.shape)
        if self.needs_input_grad[1]:
            safe = np.where(a > 0, a, 1)
            gb = unbroadcast(g * out * np.log(safe) * (a > 0), b.shape)
        return ga, gb


def operands(*xs: Any) -> list[Any]:
    """Tensors stay; Python numbers take the dtype of the first float Tensor among ``xs`` (else the default
    dtype), so ``where(c, x32, 0.0)`` stays float32; arrays keep theirs (NumPy promotion applies)."""
    dtype = next((x.dtype for x in xs if isinstance(x, Tensor) and x.dtype.kind == "f"), get_default_dtype())
    return [np.asarray(x, dtype) if isinstance(x, numbers.Number) and not isinstance(x, bool) else x for x in xs]


def add(a: Any, b: Any) -> Tensor:
    return Add.apply(*operands(a, b))


def sub(a: Any, b: Any) -> Tensor:
    return Sub.apply(*operands(a, b))


def mul(a: Any, b: Any) -> Tensor:
    return Mul.apply(*operands(a, b))


def div(a: Any, b: Any) -> Tensor:
    return Div.apply(*operands(a, b))


def pow(a: Any, b: Any) -> Tensor:  # noqa: A001 - the NumPy/PyTorch name
    return Pow.apply(*operands(a, b))


from minidl.ops.activation import sigmoid_array  # noqa: E402, F401  (ops/loss.py imports it from here)
