"""Fused losses: one Function each, so the forward keeps what the backward needs and nothing more.

Cross-entropy over C classes, log-probabilities logp_i = x_i - logsumexp(x_i) of row i, written as a
cross-entropy against a target distribution q_i (Szegedy et al. 2016, "Rethinking the Inception
Architecture for Computer Vision", for label smoothing eps)::

    loss_i = -sum_c q_ic logp_ic = (sum_c q_ic) logsumexp(x_i) - sum_c q_ic x_ic
    d loss_i / d x_i = (sum_c q_ic) softmax(x_i) - q_i

    class index t_i:   q_ic = w_c ((1 - eps) [c = t_i] + eps / C), 0 on rows whose t_i is ignore_index;
                       the mean divides by sum_i w_{t_i} over the rows that count (PyTorch's rule)
    probabilities y_i: q_ic = w_c ((1 - eps) y_ic + eps / C); the mean divides by the number of rows;
                       d loss_i / d y_ic = -(1 - eps) w_c logp_ic

The class weights w default to 1. The index case never forms q: it needs the one-hot part at N entries
and, with smoothing, w itself. Inputs [N, C, d1, ...] (targets [N, d1, ...]) are C-rows after moving
the class axis last; an unbatched input [C] has one row.

Negative log-likelihood on log-probabilities x: loss_i = -w_{t_i} x_{i, t_i}, the same mean rule.

Binary cross-entropy on logits x with target y, weight w and positive-class weight p (broadcast against
x; softplus(z) = log(1 + e^z) = max(z, 0) + log(1 + e^-|z|), so log sigmoid(x) = -softplus(-x))::

    loss = w (p y softplus(-x) + (1 - y) softplus(x))
    d loss / d x = w ((1 - y) sigmoid(x) - p y sigmoid(-x))     d loss / d y = w (p softplus(-x) - softplus(x))
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


def reduce_loss(losses: np.ndarray, reduction: str, count: float | None = None) -> np.ndarray:
    """Per-element losses -> the requested reduction (``count`` divides the mean; default: all elements)."""
    if reduction == "none":
        return losses
    total = losses.sum()
    if reduction == "sum":
        return np.asarray(total)
    n = losses.size if count is None else count
    with np.errstate(invalid="ignore", divide="ignore"):  # a mean over nothing is NaN, as PyTorch's
        return np.asarray(total / np.asarray(n, losses.dtype))


def loss_grad(g: np.ndarray, reduction: str, count: float, shape: tuple[int, ...]) -> np.ndarray:
    """dL/dloss_i for every element: g spread over the elements (divided by ``count`` for the mean). A mean
    over nothing (count 0) has gradient 0, as PyTorch's, though the loss itself is NaN."""
    if reduction == "mean":
        g = g / np.asarray(count, g.dtype) if count else np.zeros_like(g)
    return np.broadcast_to(g, shape)


# ----------------------------------------------------------------------------- class layouts
def to_rows(x: np.ndarray, op: str) -> np.ndarray:
    """Scores [N, C, d1, ...] -> rows [N * d1 * ..., C] (class axis last); [C] (unbatched) -> [1, C]."""
    if x.dtype.kind != "f" or x.ndim == 0:
        raise ValueError(f"{op}: input must be a float [N, C, ...] or [C] array, got shape {x.shape} {x.dtype}")
    if x.ndim == 1:
        return x[None]
    return x if x.ndim == 2 else np.moveaxis(x, 1, -1).reshape(-1, x.shape[1])


def from_rows(rows: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """The inverse of ``to_rows`` for an input of ``shape``."""
    if len(shape) <= 2:
        return rows.reshape(shape)
    moved = (shape[0],) + shape[2:] + (shape[1],)
    return np.moveaxis(rows.reshape(moved), -1, 1)


def index_target_rows(x: np.ndarray, target: np.ndarray, ignore_index: int, op: str) -> np.ndarray:
    """Checked class indices [N, d1, ...] (or [] for an unbatched [C] input) as one index per row."""
    if target.dtype.kind not in "iu":
        raise TypeError(f"{op}: target must hold integer class indices (or float probabilities), got {target.dtype}")
    want = _loss_shape(x.shape)
    if target.shape != want:
        raise ValueError(f"{op}: target shape {target.shape} does not match input {x.shape} (want {list(want)})")
    t = target.reshape(-1)
    c = x.shape[0] if x.ndim == 1 else x.shape[1]
    bad = (t != ignore_index) & ((t < 0) | (t >= c))
    if bad.any():
        raise IndexError(
            f"{op}: target {int(t[bad][0])} is out of range for {c} classes "
            f"(valid: 0..{c - 1}, or ignore_index={ignore_index})"
        )
    return t


def class_weight(weight, c: int, dtype, op: str) -> np.ndarray | None:
    if weight is None:
        return None
    w = np.asarray(weight, dtype=dtype)
    if w.shape != (c,):
        raise ValueError(f"{op}: weight must have one entry per class, shape ({c},), got {w.shape}")
    return w


def _loss_shape(shape: tuple[int, ...]) -> tuple[int, ...]:
    """Per-row losses' shape for an input of ``shape``: [N, d1, ...], or [] for an unbatched [C]."""
    return () if len(shape) == 1 else (shape[0],) + shape[2:]


# ----------------------------------------------------------------------------- cross-entropy
class CrossEntropy(Function):
    """F.cross_entropy: logits [N, C, d1, ...] or [C] against class indices [N, d1, ...] (int) or class
    probabilities of the logits' shape (float, differentiable too); ``weight`` [C] (an array, not
    differentiable), ``ignore_index`` (index targets), ``label_smoothing`` eps in [0, 1]. Math: module docstring.
    """

    def forward(self, logits, target, weight=None, reduction="mean", ignore_index=-100, label_smoothing=0.0):
        check_reduction("cross_entropy", reduction)
        if not 0.0 <= label_smoothing <= 1.0:
            raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {label_smoothing}")
        x = to_rows(logits, "cross_entropy")
        self.shape, self.reduction, self.eps = logits.shape, reduction, float(label_smoothing)
        self.w = class_weight(weight, x.shape[1], x.dtype, "cross_entropy")
        e, s, m = shifted_exp(x, axis=1)  # e = exp(x - m) [M, C]; s = sum of e, m = row max [M, 1]
        lse = np.log(s[:, 0]) + m[:, 0]  # logsumexp of every row
        self.save_for_backward(e, s[:, 0])
        self.soft = target.dtype.kind == "f"
        if self.soft:
            losses = self._soft_forward(x, target, lse)
        else:
            t = index_target_rows(logits, target, ignore_index, "cross_entropy")
            losses = self._index_forward(x, t, t != ignore_index, lse)
        return reduce_loss(losses.reshape(_loss_shape(logits.shape)), reduction, self.count)

    def _index_forward(self, x, t, keep, lse):
        """Row losses for class indices t; keeps t and the row factors b_i = (1 - eps) w_{t_i} (of the one-hot
        part) and a_i = eps / C (of the smoothing part w), both 0 on ignored rows."""
        c, eps, w = x.shape[1], self.eps, self.w
        t = np.where(keep, t, 0)
        wt = keep.astype(x.dtype) if w is None else w[t] * keep  # w_{t_i}, 0 on ignored rows
        self.count = float(wt.sum())  # the mean's divisor: sum of w_{t_i} over the rows that count
        self.t, self.b, self.a = t, (1 - eps) * wt, np.where(keep, eps / c, 0).astype(x.dtype)
        losses = self.b * (lse - x[np.arange(len(t)), t])
        if eps:  # + eps/C sum_c w_c (lse - x_c)
            losses += self.a * (c * lse - x.sum(axis=1) if w is None else w.sum() * lse - x @ w)
        return losses

    def _soft_forward(self, x, target, lse):
        """Row losses for class probabilities y: q = w ((1 - eps) y + eps / C); keeps q and -logp."""
        if target.shape != self.shape:
            raise ValueError(
                f"cross_entropy: probability targets must have the logits' shape {self.shape}, got {target.shape}"
            )
        c, eps = x.shape[1], self.eps
        q = to_rows(target.astype(x.dtype, copy=False), "cross_entropy") * (1 - eps) + eps / c
        if self.w is not None:
            q = q * self.w
        neg_logp = lse[:, None] - x
        self.q, self.neg_logp, self.count = q, neg_logp, float(len(x))
        return (q * neg_logp).sum(axis=1)

    def backward(self, g):
        e, s = self.saved_tensors
        g = loss_grad(g, self.reduction, self.count, _loss_shape(self.shape)).reshape(-1).astype(e.dtype, copy=False)
        if self.soft:  # (sum_c q_c) softmax - q;  d/dy_c = (1 - eps) w_c (-logp_c)
            grad = np.multiply(e, (g * self.q.sum(axis=1) / s)[:, None], out=e if self.last_use else None)
            grad -= g[:, None] * self.q
            dy = None
            if self.needs_input_grad[1]:
                dy = ((1 - self.eps) * g)[:, None] * self.neg_logp
                dy = from_rows(dy if self.w is None else dy * self.w, self.shape)
            return from_rows(grad, self.shape), dy
        w_sum = e.shape[1] if self.w is None else self.w.sum()
        row = (g * (self.b + self.a * w_sum) / s).astype(e.dtype, copy=False)
        # (sum_c q_ic) softmax(x_i) g_i, in the logits' dtype; written over e when this is its last use
        # (no retain_graph): no second [M, C] buffer, which for the LM's logits is 16 MB of fresh pages a step.
        grad = np.multiply(e, row[:, None], out=e if self.last_use else None)
        grad[np.arange(len(s)), self.t] -= g * self.b  # - the one-hot part of q
        if self.eps:
            grad -= (g * self.a)[:, None] * (1 if self.w is None else self.w)  # - the smoothing part of q
        return from_rows(grad, self.shape), None


# ----------------------------------------------------------------------------- negative log-likelihood
class NLLLoss(Function):
    """F.nll_loss: log-probabilities [N, C, d1, ...] or [C] and class indices [N, d1, ...]; ``weight`` [C]
    (an array), ``ignore_index``. loss_i = -w_{t_i} x_{i, t_i}; the mean divides by sum_i w_{t_i}."""

    def forward(self, x, target, weight=None, reduction="mean", ignore_index=-100):
        check_reduction("nll_loss", reduction)
        rows = to_rows(x, "nll_loss")
        t = index_target_rows(x, target, ignore_index, "nll_loss")
        keep = t != ignore_index
        w = class_weight(weight, rows.shape[1], rows.dtype, "nll_loss")
        self.t = np.where(keep, t, 0)
        self.wt = keep.astype(rows.dtype) if w is None else w[self.t] * keep  # w_{t_i}, 0 on ignored rows
        self.count, self.shape, self.reduction, self.dtype = float(self.wt.sum()), x.shape, reduction, rows.dtype
        losses = -self.wt * rows[np.arange(len(t)), self.t]
        return reduce_loss(losses.reshape(_loss_shape(x.shape)), reduction, self.count)

    def backward(self, g):
        g = loss_grad(g, self.reduction, self.count, _loss_shape(self.shape)).reshape(-1)
        grad = np.zeros((len(self.t), 1 if len(self.shape) == 1 else self.shape[1]), self.dtype)
        grad[np.arange(len(self.t)), self.t] = -g * self.wt
        return from_rows(grad, self.shape), None


# ----------------------------------------------------------------------------- binary cross-entropy
def _softplus(z: np.ndarray) -> np.ndarray:
    """log(1 + e^z) without overflow: max(z, 0) + log1p(e^-|z|)."""
    return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))


class BinaryCrossEntropyWithLogits(Function):
    """F.binary_cross_entropy_with_logits: logits x and targets y of one shape, any rank (both differentiable);
    ``weight`` and ``pos_weight`` arrays broadcast against x (pos_weight: one per class, the last axis)."""

    def forward(self, x, y, weight=None, pos_weight=None, reduction="mean"):
        op = "binary_cross_entropy_with_logits"
        check_reduction(op, reduction)
        if x.shape != y.shape:
            raise ValueError(f"{op}: target shape {y.shape} differs from logits shape {x.shape}")
        if x.dtype.kind != "f":
            raise TypeError(f"{op}: logits must be floating, got {x.dtype}")
        w, p = (_broadcastable(a, x, name, op) for a, name in ((weight, "weight"), (pos_weight, "pos_weight")))
        sp_neg, sp_pos = _softplus(-x), _softplus(x)  # -log sigmoid(x), -log(1 - sigmoid(x))
        py = y if p is None else p * y
        losses = py * sp_neg + (1 - y) * sp_pos
        if w is not None:
            losses = losses * w
        self.reduction, self.w, self.p = reduction, w, p
        self.save_for_backward(x, y, sp_neg, sp_pos)
        return reduce_loss(losses, reduction)

    def backward(self, g):
        x, y, sp_neg, sp_pos = self.saved_tensors
        g = loss_grad(g, self.reduction, x.size, x.shape)
        if self.w is not None:
            g = g * self.w
        gx = gy = None
        if self.needs_input_grad[0]:
            s = sigmoid_array(x)
            gx = g * (s - y) if self.p is None else g * ((1 - y) * s - self.p * y * (1 - s))
        if self.needs_input_grad[1]:
            gy = g * (sp_neg - sp_pos if self.p is None else self.p * sp_neg - sp_pos)
        return gx, gy


def _broadcastable(a, x: np.ndarray, name: str, op: str) -> np.ndarray | None:
    if a is None:
        return None
    a = np.asarray(a, dtype=x.dtype)
    try:
        fits = np.broadcast_shapes(a.shape, x.shape) == x.shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: {name} of shape {a.shape} does not broadcast to the logits' shape {x.shape}")
    return a
