"""Exercise 1: a differentiable op, written the way minidl's own ops are (minidl/ops/, tutorial 01).

Write LogSumExp, the log of the sum of exponentials along the last axis, as an autograd ``Function``:
``forward`` works on NumPy arrays and saves what ``backward`` needs; ``backward`` gets the gradient of
the loss with respect to the output and returns the gradient with respect to the input.

    y[...] = log( sum_j exp(x[..., j]) )                          x [..., n] (n >= 1)  ->  y [...]

Forward without overflow: with m[...] = max_j x[..., j],

    y = m + log( sum_j exp(x[..., j] - m) )

(every exponent is <= 0, so exp cannot overflow, and the largest term is exactly 1, so log cannot
see 0). exp(1000) is inf in float64: the naive formula fails where this one does not.

Backward: dy/dx[..., j] = exp(x[..., j]) / sum_k exp(x[..., k]) = exp(x[..., j] - y) = softmax(x)[..., j], so

    grad_x[..., j] = g[...] * exp(x[..., j] - y[...])              g [...]  ->  grad_x [..., n]

Check it:  python -m minidl.exercises check logsumexp   (gradcheck in float64 finds a wrong backward)
"""

from __future__ import annotations

import numpy as np

from minidl import Function, Tensor


class LogSumExp(Function):
    def forward(self, x: np.ndarray) -> np.ndarray:
        """x [..., n] -> y [...]. Save what backward needs with ``self.save_for_backward(...)``."""
        raise NotImplementedError("exercise: LogSumExp.forward")

    def backward(self, g: np.ndarray) -> np.ndarray:  # type: ignore[override]  # one output, one gradient
        """g [...], the gradient of the loss with respect to y -> the gradient with respect to x [..., n].
        What forward saved is in ``self.saved_tensors`` (a tuple)."""
        raise NotImplementedError("exercise: LogSumExp.backward")


def logsumexp(x: Tensor) -> Tensor:
    """LogSumExp along the last axis of a Tensor (this line is done: ``apply`` records the op on the tape)."""
    return LogSumExp.apply(x)
