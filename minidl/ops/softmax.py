"""softmax, log_softmax and logsumexp: the max-shift trick keeps them finite at inputs of +-1e4.

logsumexp(a) = m + log(sum(exp(a - m))),  m = max(a)      (every exp argument <= 0, one of them = 0)
log_softmax(a) = a - logsumexp(a)
softmax(a) = exp(a - m) / sum(exp(a - m))

A 0-d input is a distribution over one value: softmax 1, log_softmax 0 (as PyTorch). Over an empty axis softmax
and log_softmax are empty and logsumexp is -inf (the log of an empty sum), as PyTorch; logsumexp of bool or
integer tensors is taken in float32, as PyTorch promotes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from minidl.autograd import Function
from minidl.ops.reduce import expand_reduced, last_axis_sum, normalize_axis
from minidl.tensor import Tensor, get_default_dtype


def shifted_exp(a: np.ndarray, axis) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """exp(a - m) and its sum along ``axis`` (both keepdims), and m = max(a) with non-finite maxima set to 0
    (a row of all -inf then gives logsumexp = -inf instead of NaN). Over an empty axis the sum is 0, so
    logsumexp is -inf and softmax empty, as PyTorch."""
    if any(a.shape[ax] == 0 for ax in normalize_axis(axis, a.ndim)):
        s = np.zeros(np.sum(a, axis=axis, keepdims=True).shape, a.dtype)
        return np.empty_like(a), s, s.copy()
    m = np.max(a, axis=axis, keepdims=True)
    m = np.where(np.isfinite(m), m, 0)
    e = np.asarray(a - m)  # the one full-size buffer; exp in place
    np.exp(e, out=e)
    if e.ndim == 2 and normalize_axis(axis, 2) == (1,) and e.flags.c_contiguous:  # rows: the cross-entropy's
        return e, last_axis_sum(e)[:, None], m
    return e, e.sum(axis=axis, keepdims=True), m


def logsumexp_array(a: np.ndarray, axis=-1, keepdims: bool = False) -> np.ndarray:
    """log(sum(exp(a), axis)) in NumPy, stable. No gradient; see LogSumExp for the op."""
    axes = normalize_axis(axis, a.ndim)
    _, s, m = shifted_exp(a, axes)
    out = m + log_sum(s)
    return out if keepdims else out.squeeze(axis=axes)


def log_sum(s: np.ndarray) -> np.ndarray:
    """log of the sums of exp; a sum over an empty axis is 0, its log -inf (no warning: that is the answer)."""
    with np.errstate(divide="ignore"):
        return np.log(s)


def float_input(op: str, a: np.ndarray) -> np.ndarray:
    """Bool and integer inputs as floats of the default dtype (PyTorch promotes them so for logsumexp)."""
    if a.dtype.kind in "biu":
        return a.astype(get_default_dtype())
    if a.dtype.kind not in "fc":
        raise TypeError(f"{op}: expected a numeric tensor, got dtype {a.dtype}")
    return a


class LogSumExp(Function):
    """d logsumexp / da = softmax(a) along the reduced axes."""

    def forward(self, a, axis=None, keepdims=False):
        self.axes, self.keepdims = normalize_axis(axis, a.ndim), keepdims
        e, s, m = shifted_exp(float_input("logsumexp", a), self.axes)
        e /= s  # softmax, kept for backward
        self.save_for_backward(e)
        out = m + log_sum(s)
        return out if keepdims else out.squeeze(axis=self.axes)

    def backward(self, g):
        (p,) = self.saved_tensors
        return p * expand_reduced(g, p.shape, self.axes, self.keepdims)


class Softmax(Function):
    """p = softmax(a);  da = p * (g - sum(g * p))  (the Jacobian diag(p) - p p^T applied to g)."""

    def forward(self, a, axis=-1):
        self.axis = normalize_axis(axis, a.ndim)
        e, s, _ = shifted_exp(a, self.axis)
        e /= s
        self.save_for_backward(e)
        return e

    def backward(self, g):
        (p,) = self.saved_tensors
        gp = g * p
        gp -= p * gp.sum(axis=self.axis, keepdims=True)
        return gp


class LogSoftmax(Function):
    """y = a - logsumexp(a);  da = g - softmax(a) * sum(g)."""

    def forward(self, a, axis=-1):
        self.axis = normalize_axis(axis, a.ndim)
        _, s, m = shifted_exp(a, self.axis)
        out = np.asarray(a - m)  # (a - m) - log(s): exact where a = m, unlike a - (m + log(s))
        out -= log_sum(s)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g - np.exp(out) * g.sum(axis=self.axis, keepdims=True)


def softmax(x: Any, axis: int | Sequence[int] = -1) -> Tensor:
    """exp(x) / sum(exp(x)) along ``axis``, computed as exp(x - max) so +-1e4 inputs are fine."""
    return Softmax.apply(x, axis=axis)


def log_softmax(x: Any, axis: int | Sequence[int] = -1) -> Tensor:
    """x - logsumexp(x) along ``axis``; stable."""
    return LogSoftmax.apply(x, axis=axis)


def logsumexp(x: Any, axis: int | Sequence[int] | None = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over ``axis`` (None: all), a reduction like sum; stable."""
    return LogSumExp.apply(x, axis=axis, keepdims=keepdims)
