"""One-input math: exp, log, log2, sqrt, sin, cos, tan, abs, and the piecewise-constant sign, floor, ceil.

Each backward is the derivative times g. sign, floor and ceil are flat almost everywhere: their gradient is 0
(as PyTorch's), so a graph through them carries zeros rather than stopping.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.autograd import Function
from minidl.tensor import Tensor


class Exp(Function):
    def forward(self, a):
        out = np.exp(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * out  # d exp(a) = exp(a)


class Log(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return np.log(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return g / a


class Log2(Function):
    """log2(a);  d log2(a) = 1 / (a ln 2)."""

    def forward(self, a):
        self.save_for_backward(a)
        return np.log2(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return g / (a * np.log(2.0)).astype(g.dtype, copy=False)


class Sqrt(Function):
    """sqrt(a);  d sqrt(a) = 1 / (2 sqrt(a))  (inf at a = 0, as PyTorch)."""

    def forward(self, a):
        out = np.sqrt(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        with np.errstate(divide="ignore"):
            return g / (2 * out)


class Sin(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return np.sin(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return g * np.cos(a)


class Cos(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return np.cos(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return -g * np.sin(a)


class Tan(Function):
    """d tan(a) = 1 + tan(a)^2."""

    def forward(self, a):
        out = np.tan(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * (1 + out * out)


class Abs(Function):
    """|a|;  d|a| = sign(a), taken as 0 at a = 0 (as PyTorch)."""

    def forward(self, a):
        self.save_for_backward(a)
        return np.abs(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return g * np.sign(a)


class _Flat(Function):
    """A piecewise-constant function: gradient 0 everywhere (where it jumps, too)."""

    fn = staticmethod(np.sign)

    def forward(self, a):
        return self.fn(a)

    def backward(self, g):
        return np.zeros_like(g)


class Sign(_Flat):
    fn = staticmethod(np.sign)


class Floor(_Flat):
    fn = staticmethod(np.floor)


class Ceil(_Flat):
    fn = staticmethod(np.ceil)


def exp(x: Any) -> Tensor:
    return Exp.apply(x)


def log(x: Any) -> Tensor:
    return Log.apply(x)


def log2(x: Any) -> Tensor:
    return Log2.apply(x)


def sqrt(x: Any) -> Tensor:
    return Sqrt.apply(x)


def sin(x: Any) -> Tensor:
    return Sin.apply(x)


def cos(x: Any) -> Tensor:
    return Cos.apply(x)


def tan(x: Any) -> Tensor:
    return Tan.apply(x)


def abs(x: Any) -> Tensor:  # noqa: A001 - the NumPy name
    return Abs.apply(x)


def sign(x: Any) -> Tensor:
    return Sign.apply(x)


def floor(x: Any) -> Tensor:
    return Floor.apply(x)


def ceil(x: Any) -> Tensor:
    return Ceil.apply(x)
