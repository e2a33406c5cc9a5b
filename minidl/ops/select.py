"""Ops that pick between values: maximum/minimum of two tensors, where, and clamp (clip) to bounds.

The gradient goes to whichever value was picked; ties are split as PyTorch splits them (see each op).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.autograd import Function, unbroadcast
from minidl.ops.elementwise import broadcasts_to, check_broadcast, operands
from minidl.tensor import Tensor


class _PickOne(Function):
    """max/min of two broadcast operands. The gradient goes to the operand that was picked;
    on a tie it is split half and half (PyTorch's rule for ``maximum``/``minimum``), so the
    two gradients add up to g; where one side is NaN (the result is NaN) both get g, as PyTorch."""

    name = ""
    pick = staticmethod(np.maximum)
    beats = staticmethod(np.greater)  # a is picked over b where beats(a, b)

    def forward(self, a, b):
        check_broadcast(self.name, a, b)
        self.save_for_backward(a, b)
        return self.pick(a, b)

    def backward(self, g):
        a, b = self.saved_tensors
        tie = 0.5 * (a == b)
        # 1 to the side picked, 0 to the other, 1/2 each on a tie; where either is NaN neither side is beaten,
        # so both get all of g (PyTorch's rule: the NaN propagates from both)
        share_a, share_b = 1 - self.beats(b, a) - tie, 1 - self.beats(a, b) - tie
        ga = unbroadcast(g * share_a.astype(g.dtype), a.shape) if self.needs_input_grad[0] else None
        gb = unbroadcast(g * share_b.astype(g.dtype), b.shape) if self.needs_input_grad[1] else None
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


class ClampTensor(Function):
    """clamp(a, lo, hi) with tensor bounds: min(max(a, lo), hi), gradients to all three (PyTorch's rule):
    a gets g where lo <= a <= hi; lo where a < lo (and lo < hi); hi where a > hi, or everywhere hi < lo."""

    def forward(self, a, lo, hi):
        for name, bound in (("min", lo), ("max", hi)):
            check_broadcast(f"clamp ({name})", a, bound)
        self.save_for_backward(a, lo, hi)
        return np.minimum(np.maximum(a, lo), hi)

    def backward(self, g):
        a, lo, hi = self.saved_tensors
        ga = unbroadcast(g * ((a >= lo) & (a <= hi)), a.shape)
        glo = unbroadcast(g * ((a < lo) & (lo < hi)), lo.shape)
        ghi = unbroadcast(g * ((a > hi) | (hi < lo)), hi.shape)
        return ga, glo, ghi


def _plain(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def where(cond: Any, x: Any, y: Any) -> Tensor:
    """x where cond else y, all broadcast; gradients flow to x and y, none to cond."""
    x, y = operands(x, y)
    return Where.apply(np.asarray(_plain(cond), bool), x, y)


def maximum(a: Any, b: Any) -> Tensor:
    """Elementwise max; on ties each input gets half the gradient (as PyTorch)."""
    return Maximum.apply(*operands(a, b))


def minimum(a: Any, b: Any) -> Tensor:
    """Elementwise min; on ties each input gets half the gradient (as PyTorch)."""
    return Minimum.apply(*operands(a, b))


def clip(x: Any, lo: Any = None, hi: Any = None) -> Tensor:
    """Clamp to [lo, hi] (None = no bound); gradient 1 inside, bounds included, 0 outside. Bounds that are
    Tensors get gradients too (where they were picked), as in torch.clamp."""
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        if lo is None and hi is None:
            raise ValueError("clip: at least one of lo and hi must be given")
        x, lo, hi = operands(x, -np.inf if lo is None else lo, np.inf if hi is None else hi)
        return ClampTensor.apply(x, lo, hi)
    return Clip.apply(x, lo=lo, hi=hi)


clamp = clip
