"""Functional forms of layers and losses (``import minidl.nn.functional as F``)."""

from __future__ import annotations

import warnings
from typing import Any

from minidl.nn.container import flatten  # noqa: F401
from minidl.nn.conv import conv2d  # noqa: F401
from minidl.nn.dropout import dropout  # noqa: F401
from minidl.nn.embedding import embedding  # noqa: F401
from minidl.nn.linear import linear  # noqa: F401
from minidl.nn.norm import batch_norm  # noqa: F401
from minidl.nn.pooling import adaptive_avg_pool2d, avg_pool2d, global_avg_pool2d, max_pool2d  # noqa: F401
from minidl.ops import log_softmax, logsumexp, softmax  # noqa: F401  (re-exported as F.softmax, ...)

# layers' functional forms, each defined beside its module in minidl/nn/ (re-exported as F.conv2d, ...)
from minidl.ops.activation import *  # noqa: F403  (relu, gelu, ...: ops/activation.py's __all__)
from minidl.ops.loss import BinaryCrossEntropyWithLogits, CrossEntropy, NLLLoss, check_reduction
from minidl.tensor import Tensor, tensor


def _array(a: Any) -> Any:
    """A loss's class weights as a plain array: they are constants here (no gradient flows to them)."""
    if isinstance(a, Tensor):
        if a.requires_grad:
            raise NotImplementedError("not supported: a gradient with respect to a loss's weight or pos_weight")
        return a.data
    return a


def _no_legacy(op: str, size_average: Any, reduce: Any) -> None:
    if size_average is not None or reduce is not None:
        raise NotImplementedError(
            f"{op}: not supported: size_average and reduce (deprecated in PyTorch); use reduction="
        )


# ---- losses (fused: one Function each; formulas in minidl/ops/loss.py). PyTorch's names and defaults.
def cross_entropy(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
    label_smoothing: float = 0.0,
) -> Tensor:
    """Softmax cross-entropy of logits [N, C, d1, ...] (or unbatched [C]) against class indices [N, d1, ...]
    (int; ``ignore_index`` rows count for nothing) or class probabilities of the logits' shape (float).

    loss_i = -sum_c q_ic log softmax(input_i)_c with q the (smoothed, weighted) target distribution;
    ``weight`` [C] rescales each class; ``label_smoothing`` eps mixes eps/C of the uniform distribution into
    the target; ``reduction`` "mean" (divided by the summed weights of the rows that count, or the number of
    rows for probabilities), "sum" or "none" (shape [N, d1, ...]). As torch.nn.functional.cross_entropy.
    """
    _no_legacy("cross_entropy", size_average, reduce)
    return CrossEntropy.apply(
        input,
        target,
        weight=_array(weight),
        reduction=reduction,
        ignore_index=ignore_index,
        label_smoothing=label_smoothing,
    )


def nll_loss(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    ignore_index: int = -100,
    reduce: Any = None,
    reduction: str = "mean",
) -> Tensor:
    """Negative log-likelihood of log-probabilities [N, C, d1, ...] (or [C]) at class indices [N, d1, ...]:
    loss_i = -weight[t_i] input[i, t_i]; mean over the summed weights of the rows that count. As torch's."""
    _no_legacy("nll_loss", size_average, reduce)
    return NLLLoss.apply(input, target, weight=_array(weight), reduction=reduction, ignore_index=ignore_index)


def binary_cross_entropy_with_logits(
    input: Any,
    target: Any,
    weight: Any = None,
    size_average: Any = None,
    reduce: Any = None,
    reduction: str = "mean",
    pos_weight: Any = None,
) -> Tensor:
    """-weight [pos_weight y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed stably from the logits x;
    target y of x's shape; weight and pos_weight broadcast against x (pos_weight per class: the last axis)."""
    _no_legacy("binary_cross_entropy_with_logits", size_average, reduce)
    return BinaryCrossEntropyWithLogits.apply(
        input, target, weight=_array(weight), pos_weight=_array(pos_weight), reduction=reduction
    )


def mse_loss(input: Any, target: Any, size_average: Any = None, reduce: Any = None, reduction: str = "mean") -> Tensor:
    """Mean squared error (input - target)^2, composed from Tensor operations (autograd gives d/dinput =
    2 (input - target) and d/dtarget = -2 (input - target)). Shapes that differ broadcast, with a warning
    (usually a mistake such as [N, 1] against [N]), as PyTorch does."""
    _no_legacy("mse_loss", size_average, reduce)
    check_reduction("mse_loss", reduction)
    input = input if isinstance(input, Tensor) else tensor(input)
    target = target if isinstance(target, Tensor) else tensor(target)
    if input.shape != target.shape:
        warnings.warn(
            f"mse_loss: target shape {target.shape} differs from input shape {input.shape}; they broadcast",
            UserWarning,
            stacklevel=2,
        )
    diff = input - target
    sq = diff * diff
    return sq if reduction == "none" else sq.sum() if reduction == "sum" else sq.mean()
