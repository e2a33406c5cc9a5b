"""Functional forms of layers and losses (``import minidl.nn.functional as F``)."""

from __future__ import annotations

from typing import Any

# layers' functional forms, each defined beside its module in minidl/nn/ (re-exported as F.conv2d, ...)
from minidl.nn.activation import (  # noqa: F401
    elu,
    gelu,
    hardswish,
    leaky_relu,
    mish,
    relu,
    sigmoid,
    silu,
    softplus,
    tanh,
)
from minidl.nn.container import flatten  # noqa: F401
from minidl.nn.conv import conv2d  # noqa: F401
from minidl.nn.dropout import dropout  # noqa: F401
from minidl.nn.embedding import embedding  # noqa: F401
from minidl.nn.linear import linear  # noqa: F401
from minidl.nn.norm import batch_norm  # noqa: F401
from minidl.nn.pooling import adaptive_avg_pool2d, avg_pool2d, global_avg_pool2d, max_pool2d  # noqa: F401
from minidl.ops import log_softmax, logsumexp, softmax  # noqa: F401  (re-exported as F.softmax, ...)
from minidl.ops.loss import BinaryCrossEntropyWithLogits, CrossEntropy
from minidl.tensor import Tensor


# ---- softmax family and losses (fused: one Function each; formulas in minidl/ops/loss.py)
def cross_entropy(logits: Any, target: Any, reduction: str = "mean", ignore_index: int = -100) -> Tensor:
    """Softmax cross-entropy: logits [N, C] (float), target [N] class indices (int).

    loss_i = logsumexp(logits_i) - logits_i[target_i]; ``reduction`` "mean" (over rows whose target is not
    ``ignore_index``), "sum" or "none" ([N], 0 on ignored rows). Same as torch.nn.functional.cross_entropy.
    """
    return CrossEntropy.apply(logits, target, reduction=reduction, ignore_index=ignore_index)


def binary_cross_entropy_with_logits(logits: Any, target: Any, reduction: str = "mean") -> Tensor:
    """-[y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))], computed stably from the logits x; target y of x's shape."""
    return BinaryCrossEntropyWithLogits.apply(logits, target, reduction=reduction)
