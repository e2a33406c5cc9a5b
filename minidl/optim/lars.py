"""LARS: layer-wise adaptive rate scaling (You, Gitman & Ginsburg, 2017), for very large batches."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from minidl.optim.optimizer import REQUIRED, Optimizer, ParamsT, check_nonnegative
from minidl.tensor import Tensor


class LARS(Optimizer):
    """SGD with momentum where each parameter tensor (layer) gets its own learning rate.

    For each parameter w with gradient g (Algorithm 1 of You et al. 2017, with eps for safety):

        local_lr = trust_coefficient * ||w|| / (||g|| + weight_decay * ||w|| + eps)
        v <- momentum * v + lr * local_lr * (g + weight_decay * w)      (v_0 = 0)
        w <- w - v

    The ratio ||w|| / ||g|| keeps every layer's step a fixed fraction of its weights, whatever the
    scale of its gradient. When ||w|| or ||g|| is 0 (a zero-initialized bias, an unused
    parameter) local_lr is 1, as in the common implementations. A group with ``adapt=False``
    skips the layer-wise rate (local_lr = 1: plain SGD with momentum); ``exclude_bias_and_norm``
    builds such groups for biases and batch-norm parameters, which LARS usually leaves out.
    State per parameter: ``momentum_buffer`` (v).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = REQUIRED,
        momentum: float = 0.9,
        weight_decay: float = 0.0,
        trust_coefficient: float = 0.001,
        eps: float = 1e-8,
        adapt: bool = True,
    ):
        defaults = dict(
            lr=lr,
            momentum=momentum,
            weight_decay=weight_decay,
            trust_coefficient=trust_coefficient,
            eps=eps,
            adapt=adapt,
        )
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonnegative(self, group, "lr", "momentum", "weight_decay", "trust_coefficient", "eps")
        group["adapt"] = bool(group["adapt"])

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, momentum, weight_decay = group["lr"], group["momentum"], group["weight_decay"]
        trust, eps, adapt = group["trust_coefficient"], group["eps"], group["adapt"]
        for p, g in self.params_with_grad(group):
            w = p.data
            local_lr = 1.0
            if adapt:
                w_norm, g_norm = float(np.linalg.norm(w.ravel())), float(np.linalg.norm(g.ravel()))
                if w_norm > 0.0 and g_norm > 0.0:
                    local_lr = trust * w_norm / (g_norm + weight_decay * w_norm + eps)
            if weight_decay != 0:
                g = g + weight_decay * w
            scaled = np.multiply(g, lr * local_lr, out=np.empty_like(w))
            state = self.state.setdefault(p, {})
            v = state.get("momentum_buffer")
            if v is None:
                v = state["momentum_buffer"] = scaled  # v_1 = 0 * momentum + scaled
            else:
                v *= momentum
                v += scaled
            w -= v


def exclude_bias_and_norm(params: Iterable[Tensor], **overrides: Any) -> list[dict[str, Any]]:
    """Split parameters into two groups: weights (ndim >= 2) and the rest (biases, norm scales/shifts).

    The second group gets ``weight_decay=0`` and ``adapt=False`` (no layer-wise rate), as large-batch
    recipes do (Goyal et al. 2017; You et al. 2017); ``overrides`` replaces those settings.
    Pass the result to an optimizer: ``LARS(exclude_bias_and_norm(model.parameters()), lr=...)``.
    Optimizers without an ``adapt`` setting keep it as an unused group entry.
    """
    params = list(params)
    weights = [p for p in params if p.ndim >= 2]
    others = [p for p in params if p.ndim < 2]
    groups: list[dict[str, Any]] = []
    if weights:
        groups.append({"params": weights})
    if others:
        groups.append({"params": others, "weight_decay": 0.0, "adapt": False, **overrides})
    return groups
