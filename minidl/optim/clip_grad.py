"""Gradient clipping by global norm (Pascanu et al. 2013; Zaremba et al. 2014 clip the LSTM's at 5)."""

from __future__ import annotations

import math
from collections.abc import Iterable

import numpy as np

from minidl.tensor import Tensor


def clip_grad_norm(
    params: Tensor | Iterable[Tensor],
    max_norm: float,
    norm_type: float = 2.0,
    error_if_nonfinite: bool = False,
) -> float:
    """Scale all gradients in place so that their joint norm is at most ``max_norm``; return the norm before.

    The joint norm is the norm of the vector of every gradient entry,
    ``total = (sum_p ||g_p||^q)^(1/q)`` for ``norm_type`` q (``inf``: the largest |entry|). If
    ``total > max_norm`` each gradient is multiplied by ``max_norm / (total + 1e-6)``, as
    ``torch.nn.utils.clip_grad_norm_`` does. Parameters whose ``.grad`` is None are skipped.
    Per-tensor norms are computed in the gradients' dtype and combined in float64.

    Raises RuntimeError if the norm is NaN or infinite and ``error_if_nonfinite`` is set
    (otherwise the gradients are scaled by NaN, as in PyTorch, and the caller sees the returned norm).
    """
    if isinstance(params, Tensor):
        params = [params]
    grads = [p.grad for p in params if p.grad is not None]
    max_norm, norm_type = float(max_norm), float(norm_type)
    if max_norm < 0:
        raise ValueError(f"clip_grad_norm: max_norm must be >= 0, got {max_norm}")
    if not norm_type > 0:
        raise ValueError(f"clip_grad_norm: norm_type must be > 0 (or inf), got {norm_type}")
    if not grads:
        return 0.0
    if norm_type == math.inf:
        total = max(float(np.max(np.abs(g))) if g.size else 0.0 for g in grads)
    else:
        norms = np.array([np.linalg.norm(g.ravel(), ord=norm_type) if g.size else 0.0 for g in grads], np.float64)
        total = float(np.linalg.norm(norms, ord=norm_type))
    if error_if_nonfinite and not math.isfinite(total):
        raise RuntimeError(
            f"clip_grad_norm: the total norm of order {norm_type} of the gradients is {total}; "
            "pass error_if_nonfinite=False to scale by it anyway"
        )
    coef = max_norm / (total + 1e-6)
    if not coef >= 1.0:  # also scales when total is NaN, as PyTorch does
        for g in grads:
            g *= coef
    return total
