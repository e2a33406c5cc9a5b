"""Adam (Kingma & Ba, 2015) and AdamW (Loshchilov & Hutter, 2019), as ``torch.optim.Adam`` / ``AdamW``."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minidl.optim.optimizer import Optimizer, ParamsT, check_nonnegative


class Adam(Optimizer):
    """Adam with bias correction. For each parameter p with gradient g, at step t = 1, 2, ...:

        g <- g + weight_decay * p                        (Adam: L2 penalty in the gradient)
        p <- p * (1 - lr * weight_decay)                 (AdamW instead: decoupled weight decay)
        m <- beta1 * m + (1 - beta1) * g                 (first moment, m_0 = 0)
        v <- beta2 * v + (1 - beta2) * g * g             (second moment, v_0 = 0)
        v_hat <- max(v_hat, v) if amsgrad, else v        (AMSGrad, Reddi et al. 2018)
        p <- p - lr / (1 - beta1^t) * m / (sqrt(v_hat) / sqrt(1 - beta2^t) + eps)

    The last line is PyTorch's arrangement of m_hat / (sqrt(v_hat_corrected) + eps); eps is added
    after the bias correction of v, as in PyTorch.
    State per parameter: ``step`` (int), ``exp_avg`` (m), ``exp_avg_sq`` (v), ``max_exp_avg_sq``.
    """

    decoupled_weight_decay = False

    def __init__(
        self,
        params: ParamsT,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
        weight_decay: float = 0.0,
        amsgrad: bool = False,
    ):
        defaults = dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, amsgrad=amsgrad)
        super().__init__(params, defaults)

    def _check_group(self, group: dict[str, Any]) -> None:
        check_nonnegative(self, group, "lr", "eps", "weight_decay")
        betas = tuple(group["betas"])
        if len(betas) != 2 or not all(0.0 <= float(b) < 1.0 for b in betas):
            raise ValueError(f"{type(self).__name__}: invalid betas {group['betas']} (need two numbers in [0, 1))")
        group["betas"] = (float(betas[0]), float(betas[1]))
        group["amsgrad"] = bool(group["amsgrad"])

    def _update_group(self, group: dict[str, Any]) -> None:
        lr, (beta1, beta2), eps = group["lr"], group["betas"], group["eps"]
        weight_decay, amsgrad = group["weight_decay"], group["amsgrad"]
        for p, g in self.params_with_grad(group):
            state = self.state.get(p)
            if state is None:
                zeros = np.zeros_like
                state = self.state[p] = {"step": 0, "exp_avg": zeros(p.data), "exp_avg_sq": zeros(p.data)}
                if amsgrad:
                    state["max_exp_avg_sq"] = np.zeros_like(p.data)
            state["step"] = t = state["step"] + 1
            if weight_decay != 0:
                if self.decoupled_weight_decay:
                    p.data *= 1.0 - lr * weight_decay
                else:
                    g = g + weight_decay * p.data
            m, v = state["exp_avg"], state["exp_avg_sq"]
            tmp = np.square(g, out=np.empty_like(p.data))  # the one scratch array of this update
            m *= beta1
            m += (1.0 - beta1) * g
            v *= beta2
            tmp *= 1.0 - beta2
            v += tmp
            if amsgrad:
                v = np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])
            step_size = lr / (1.0 - beta1**t)
            denom = np.sqrt(v, out=tmp)
            denom /= math.sqrt(1.0 - beta2**t)
            denom += eps
            update = np.divide(m, denom, out=tmp)
            update *= step_size
            p.data -= update


class AdamW(Adam):
    """Adam with decoupled weight decay: p <- p * (1 - lr * weight_decay) before the Adam step.

    Same state and arguments as Adam (keyword-only after ``lr``); the default ``weight_decay`` is 0.01,
    as in PyTorch.
    """

    decoupled_weight_decay = True

    def __init__(self, params: ParamsT, lr: float = 1e-3, *, weight_decay: float = 0.01, **kwargs: Any):
        super().__init__(params, lr=lr, weight_decay=weight_decay, **kwargs)
