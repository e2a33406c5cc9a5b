"""Fused losses: one Function each, so the forward keeps what the backward needs and nothing more.

Cross-entropy over C classes, for row i with target t_i:

    loss_i = logsumexp(x_i) - x_i[t_i]            d loss_i / d x_i = softmax(x_i) - onehot(t_i)

Binary cross-entropy on logits, with z = x and target y in [0, 1]:

    loss = max(x, 0) - x y + log(1 + exp(-|x|))   d loss / d x = sigmoid(x) - y,   d loss / d y = -x
"""

from __future__ import annotations

import numpy as np

from minidl.ops.elementwise import sigmoid_array
from minidl.ops.softmax import shifted_exp
from minidl.tensor import Function

REDUCTIONS = ("mean", "sum", "none")


def check_reduction(op: str, reduction: str) -> None:
    if reduction not in REDUCTIONS:
        raise ValueError(f"{op}: reduction must be one of {REDUCTIONS}, got {reduction!r}")


def reduce_loss(losses: np.ndarray, reduction: str, count: int | None = None) -> np.ndarray:
    """Per-element losses -> the requested reduction (``count`` divides the mean; default: all elements)."""
    if reduction == "none":
        return losses
    total = losses.sum()
    if reduction == "sum":
        return np.asarray(total)
    n = losses.size if count is None else count
    with np.errstate(invalid="ignore", divide="ignore"):  # a mean over nothing is NaN, as PyTorch's
        return np.asarray(total / np.asarray(n, losses.dtype))


class CrossEntropy(Function):
    """F.cross_entropy on logits [N, C] and integer targets [N] (rows with ``ignore_index`` count for nothing;
    the mean divides by the rows that count).

    Forward makes one [N, C] buffer, exp(x - max); the backward scales it row by row into the gradient and
    subtracts the one-hot part at the N target entries: dx = (softmax(x) - onehot(t)) * dL/dloss_i.
    """

    def forward(self, logits, target, reduction="mean", ignore_index=-100):
        check_reduction("cross_entropy", reduction)
        _check_cross_entropy_inputs(logits, target, ignore_index)
        n = logits.shape[0]
        rows = np.arange(n)
        keep = target != ignore_index
        t = np.where(keep, target, 0)
        e, s, m = shifted_exp(logits, axis=1)  # e: [N, C]; s, m: [N, 1]
        s, m = s[:, 0], m[:, 0]
        losses = (np.log(s) - (logits[rows, t] - m)) * keep  # logsumexp(x_i) - x_i[t_i], shifted by m_i
        self.count = int(keep.sum())
        self.reduction = reduction
        self.save_for_backward(e, s, t, keep)
        return reduce_loss(losses, reduction, self.count)

    def backward(self, g):
        e, s, t, keep = self.saved_tensors
        if self.reduction == "mean":  # every row ignored: the loss is NaN but the gradient 0, as PyTorch's
            g = g / np.asarray(max(self.count, 1), g.dtype)
        w = (g * keep).astype(e.dtype, copy=False)  # dL/dloss_i, zero on ignored rows
        grad = e * (w / s)[:, None]  # softmax(x_i) * w_i
        grad[np.arange(len(t)), t] -= w  # - onehot(t_i) * w_i
        return grad, None


def _check_cross_entropy_inputs(logits: np.ndarray, target: np.ndarray, ignore_index: int) -> None:
    if logits.ndim != 2 or logits.dtype.kind != "f":
        raise ValueError(f"cross_entropy: logits must be a float [N, C] array, got shape {logits.shape} {logits.dtype}")
    if target.dtype.kind not in "iu":
        raise TypeError(f"cross_entropy: target must hold integer class indices, got dtype {target.dtype}")
    if target.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy: target shape {target.shape} does not match logits {logits.shape} (want [N])")
    c = logits.shape[1]
    bad = (target != ignore_index) & ((target < 0) | (target >= c))
    if bad.any():
        raise IndexError(
            f"cross_entropy: target {int(target[bad][0])} is out of range for {c} classes "
            f"(valid: 0..{c - 1}, or ignore_index={ignore_index})"
        )


class BinaryCrossEntropyWithLogits(Function):
    """F.binary_cross_entropy_with_logits: logits and targets of one shape, any rank; both differentiable."""

    def forward(self, x, y, reduction="mean"):
        check_reduction("binary_cross_entropy_with_logits", reduction)
        if x.shape != y.shape:
            raise ValueError(
                f"binary_cross_entropy_with_logits: target shape {y.shape} differs from logits shape {x.shape}"
            )
        if x.dtype.kind != "f":
            raise TypeError(f"binary_cross_entropy_with_logits: logits must be floating, got {x.dtype}")
        self.reduction = reduction
        self.save_for_backward(x, y)
        losses = np.maximum(x, 0) - x * y + np.log1p(np.exp(-np.abs(x)))
        return reduce_loss(losses, reduction)

    def backward(self, g):
        x, y = self.saved_tensors
        if self.reduction == "mean":
            g = g / np.asarray(x.size, g.dtype)
        gx = g * (sigmoid_array(x) - y) if self.needs_input_grad[0] else None
        gy = g * -x if self.needs_input_grad[1] else None
        return gx, gy
