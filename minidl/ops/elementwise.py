"""Elementwise ops. Binary ones broadcast as NumPy does; backward sums the gradient back
to each input's shape with ``unbroadcast``."""

from __future__ import annotations

import numpy as np

from minidl.tensor import Function, unbroadcast


def check_broadcast(op: str, a: np.ndarray, b: np.ndarray) -> None:
    """Raise a ValueError naming the op and both shapes when they do not broadcast."""
    try:
        np.broadcast_shapes(a.shape, b.shape)
    except ValueError:
        raise ValueError(f"{op}: shapes {a.shape} and {b.shape} cannot be broadcast together") from None


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


class Tanh(Function):
    def forward(self, a):
        out = np.tanh(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * (1 - out * out)  # d tanh = 1 - tanh^2


def sigmoid_array(a: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-a)), computed without overflow for large |a|."""
    return 0.5 * (np.tanh(0.5 * a) + 1)


class Sigmoid(Function):
    def forward(self, a):
        out = sigmoid_array(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * out * (1 - out)  # d sigma = sigma (1 - sigma)


class ReLU(Function):
    def forward(self, a):
        mask = a > 0
        self.save_for_backward(mask)
        return a * mask

    def backward(self, g):
        (mask,) = self.saved_tensors
        return g * mask


class Cast(Function):
    def forward(self, a, dtype):
        self.in_dtype = a.dtype
        return a.astype(dtype)

    def backward(self, g):
        return g.astype(self.in_dtype)


class Pow(Function):
    """a ** b;  da = b a^(b-1),  db = a^b log(a)  (db only where a > 0)."""

    def forward(self, a, b):
        check_broadcast("pow", a, b)
        out = a**b
        self.save_for_backward(a, b, out)
        return out

    def backward(self, g):
        a, b, out = self.saved_tensors
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = unbroadcast(g * b * a ** (b - 1), a.shape)
        if self.needs_input_grad[1]:
            safe = np.where(a > 0, a, 1)
            gb = unbroadcast(g * out * np.log(safe) * (a > 0), b.shape)
        return ga, gb
