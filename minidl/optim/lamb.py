"""LAMB: layer-wise adaptive moments (You et al., "Large Batch Optimization for Deep Learning: Training BERT in
76 minutes", 2020): Adam's step direction with LARS's per-layer trust ratio, for very large batches."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minidl.optim.optimizer import Optimizer, ParamsT, check_nonnegative


class LAMB(Optimizer):
    """For each parameter tensor (layer) w with gradient g, at step t = 1, 2, ... (Algorithm 2 of You et al. 2020):

        m <- beta1 * m + (1 - beta1) * g,   v <- beta2 * v + (1 - beta2) * g * g        (m_0 = v_0 = 0)
        r = (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^t)) + eps)                        (Adam's direction)
        u = r + weight_decay * w                                                         (decoupled decay)
        trust = ||w|| / ||u||        (1 when ||w|| or ||u|| is 0, or when the group has adapt=False)
        w <- w - lr * trust * u

    The trust ratio makes every layer's step ``lr`` times its weights' norm, whatever its gradient's scale; the
    scaling function phi of the paper is the identity here. ``optim.exclude_bias_and_norm`` builds groups with
    ``adapt=False`` and no decay for biases and norm parameters. State: ``step``, ``exp_avg`` (m), ``exp_avg_sq`` (v).
    """

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        adapt: bool = True,
    ):
        super().__init__(params, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, adapt=adapt))

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonnegative(self, group, "lr", "eps", "weight_decay")
        betas = tuple(group["betas"])
        if len(betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in betas):
            raise ValueError(f"LAMB: invalid betas {group['betas']} (need two numbers in [0, 1))")
        group["betas"], group["adapt"] = (float(betas[0]), float(betas[1])), bool(group["adapt"])

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        for p, g in self.params_with_grad(group):
            state = self.state.get(p)
            if state is None:
                state = self.state[p] = {
                    "step": 0,
                    "exp_avg": np.zeros_like(p.data),
                    "exp_avg_sq": np.zeros_like(p.data),
                }
            state["step"] = t = state["step"] + 1
            m, v = state["exp_avg"], state["exp_avg_sq"]
            m *= beta1
            m += (1.0 - beta1) * g
            v *= beta2
            v += (1.0 - beta2) * np.square(g)
            denom = np.sqrt(v) / math.sqrt(1.0 - beta2**t) + eps
            u = m / (1.0 - beta1**t) / denom
            if group["weight_decay"] != 0:
                u += group["weight_decay"] * p.data
            p.data -= lr * self.trust_ratio(p.data, u, group["adapt"]) * u

    @staticmethod
    def trust_ratio(w: np.ndarray, u: np.ndarray, adapt: bool) -> float:
        """||w|| / ||u||, or 1 where either is 0 or the group does not adapt."""
        w_norm, u_norm = float(np.linalg.norm(w.ravel())), float(np.linalg.norm(u.ravel()))
        return w_norm / u_norm if adapt and w_norm > 0.0 and u_norm > 0.0 else 1.0
