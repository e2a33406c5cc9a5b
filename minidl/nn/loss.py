"""Loss modules (PyTorch's names and arguments): each holds its options and calls the functional form.

As in PyTorch, a class ``weight`` and ``pos_weight`` are buffers: saved in state_dict, not trained.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl.nn.functional as F
from minidl.nn.module import Module
from minidl.ops.loss import check_reduction
from minidl.tensor import Tensor


def _buffer(a: Any) -> np.ndarray | None:
    return None if a is None else np.array(a.data if isinstance(a, Tensor) else a, copy=True)


class _Loss(Module):
    def __init__(self, reduction: str = "mean", size_average: Any = None, reduce: Any = None):
        super().__init__()
        F._no_legacy(type(self).__name__, size_average, reduce)
        check_reduction(type(self).__name__, reduction)
        self.reduction = reduction

    def extra_repr(self) -> str:
        return "" if self.reduction == "mean" else f"reduction={self.reduction!r}"


class CrossEntropyLoss(_Loss):
    """CrossEntropyLoss(weight=None, ignore_index=-100, reduction="mean", label_smoothing=0.0):
    ``loss(input, target)`` is ``F.cross_entropy`` with these options."""

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
        label_smoothing: float = 0.0,
    ):
        super().__init__(reduction, size_average, reduce)
        self.register_buffer("weight", _buffer(weight))
        self.ignore_index, self.label_smoothing = ignore_index, label_smoothing

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.cross_entropy(
            input,
            target,
            self.weight,
            ignore_index=self.ignore_index,
            reduction=self.reduction,
            label_smoothing=self.label_smoothing,
        )


class NLLLoss(_Loss):
    """NLLLoss(weight=None, ignore_index=-100, reduction="mean"): ``F.nll_loss`` on log-probabilities."""

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        ignore_index: int = -100,
        reduce: Any = None,
        reduction: str = "mean",
    ):
        super().__init__(reduction, size_average, reduce)
        self.register_buffer("weight", _buffer(weight))
        self.ignore_index = ignore_index

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.nll_loss(input, target, self.weight, ignore_index=self.ignore_index, reduction=self.reduction)


class BCEWithLogitsLoss(_Loss):
    """BCEWithLogitsLoss(weight=None, reduction="mean", pos_weight=None): ``F.binary_cross_entropy_with_logits``."""

    def __init__(
        self,
        weight: Any = None,
        size_average: Any = None,
        reduce: Any = None,
        reduction: str = "mean",
        pos_weight: Any = None,
    ):
        super().__init__(reduction, size_average, reduce)
        self.register_buffer("weight", _buffer(weight))
        self.register_buffer("pos_weight", _buffer(pos_weight))

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.binary_cross_entropy_with_logits(
            input, target, self.weight, reduction=self.reduction, pos_weight=self.pos_weight
        )


class MSELoss(_Loss):
    """MSELoss(reduction="mean"): ``F.mse_loss``, the mean (or sum) of (input - target)^2."""

    def __init__(self, size_average: Any = None, reduce: Any = None, reduction: str = "mean"):
        super().__init__(reduction, size_average, reduce)

    def forward(self, input: Tensor, target: Any) -> Tensor:
        return F.mse_loss(input, target, reduction=self.reduction)
