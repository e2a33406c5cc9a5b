"""Elementwise ops. Binary ones broadcast as NumPy does; backward sums the gradient back
to each input's shape with ``unbroadcast``."""

from __future__ import annotations

import numpy as np

from minidl.tensor import Function, unbroadcast


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


class Abs(Function):
    """|a|;  d|a| = sign(a), taken as 0 at a = 0 (as PyTorch)."""

    def forward(self, a):
        self.save_for_backward(a)
        return np.abs(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        return g * np.sign(a)


class _PickOne(Function):
    """max/min of two broadcast operands. The gradient goes to the operand that was picked;
    on a tie it is split half and half (PyTorch's rule for ``maximum``/``minimum``), so the
    two gradients always add up to g."""

    name = ""
    pick = staticmethod(np.maximum)
    beats = staticmethod(np.greater)  # a is picked over b where beats(a, b)

    def forward(self, a, b):
        check_broadcast(self.name, a, b)
        self.save_for_backward(a, b)
        return self.pick(a, b)

    def backward(self, g):
        a, b = self.saved_tensors
        share_a = (self.beats(a, b) + 0.5 * (a == b)).astype(g.dtype)  # 1, 0 or 1/2 on a tie
        ga = unbroadcast(g * share_a, a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * (1 - share_a), b.shape) if self.needs_input_grad[1] else None
        return ga, gb


class Maximum(_PickOne):
    name, pick, beats = "maximum", staticmethod(np.maximum), staticmethod(np.greater)


class Minimum(_PickOne):
    name, pick, beats = "minimum", staticmethod(np.minimum), staticmethod(np.less)


class Where(Function):
    """where(cond, a, b): a where cond is true, else b (all three broadcast).
    da = g * cond, db = g * (1 - cond); cond gets no gradient."""

    def forward(self, cond, a, b):
        try:
            np.broadcast_shapes(cond.shape, a.shape, b.shape)
        except ValueError:
            raise ValueError(
                f"where: condition {cond.shape}, x {a.shape} and y {b.shape} cannot be broadcast together"
            ) from None
        self.cond = cond.astype(bool, copy=False)
        self.shapes = a.shape, b.shape
        return np.where(self.cond, a, b)

    def backward(self, g):
        sa, sb = self.shapes
        zero = np.zeros((), g.dtype)
        ga = unbroadcast(np.where(self.cond, g, zero), sa) if self.needs_input_grad[1] else None
        gb = unbroadcast(np.where(self.cond, zero, g), sb) if self.needs_input_grad[2] else None
        return None, ga, gb


class Clip(Function):
    """clip(a, lo, hi) with scalar or broadcastable array bounds (None = unbounded).
    The gradient passes where lo <= a <= hi, bounds included (as PyTorch's clamp)."""

    def forward(self, a, lo=None, hi=None):
        if lo is None and hi is None:
            raise ValueError("clip: at least one of lo and hi must be given")
        for bound in (lo, hi):
            if bound is not None and not broadcasts_to(np.shape(bound), a.shape):
                raise ValueError(f"clip: bound of shape {np.shape(bound)} does not broadcast to input {a.shape}")
        inside = np.ones(a.shape, bool)
        if lo is not None:
            inside &= a >= lo
        if hi is not None:
            inside &= a <= hi
        self.save_for_backward(inside)
        return np.clip(a, lo, hi).astype(a.dtype, copy=False)

    def backward(self, g):
        (inside,) = self.saved_tensors
        return g * inside
