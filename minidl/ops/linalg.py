"""Matrix multiplication, 2-D and batched (NumPy ``matmul`` semantics, batch dims broadcast)."""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.autograd import Function, unbroadcast
from minidl.tensor import Tensor


class MatMul(Function):
    """C = A @ B;  dA = dC @ B^T,  dB = A^T @ dC  (summed over broadcast batch dims)."""

    def forward(self, a, b):
        if a.ndim == 0 or b.ndim == 0:
            raise ValueError(f"matmul: both operands need at least 1 dimension, got shapes {a.shape} and {b.shape}")
        ka = a.shape[-1]
        kb = b.shape[-2] if b.ndim >= 2 else b.shape[0]
        if ka != kb:
            raise ValueError(f"matmul: shapes {a.shape} and {b.shape} do not align (inner dimensions {ka} != {kb})")
        try:
            np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
        except ValueError:
            raise ValueError(f"matmul: batch dimensions of {a.shape} and {b.shape} do not broadcast") from None
        self.save_for_backward(a, b)
        return a @ b

    def backward(self, g):
        a, b = self.saved_tensors
        # Promote 1-D operands to matrices so the formulas hold, then drop the added axes. The output lost
        # b's axis (if 1-D) last and a's row axis before it: restore them in that order (1-D @ 1-D: g is 0-d).
        a2 = a[None, :] if a.ndim == 1 else a
        b2 = b[:, None] if b.ndim == 1 else b
        g2 = g[..., None] if b.ndim == 1 else g
        if a.ndim == 1:
            g2 = g2[..., None, :]
        ga = gb = None
        if self.needs_input_grad[0]:
            ga = g2 @ np.swapaxes(b2, -1, -2)
            ga = unbroadcast(ga, a2.shape).reshape(a.shape)
        if self.needs_input_grad[1]:
            gb = np.swapaxes(a2, -1, -2) @ g2
            gb = unbroadcast(gb, b2.shape).reshape(b.shape)
        return ga, gb


def matmul(a: Any, b: Any) -> Tensor:
    """a @ b with NumPy's rules: 1-D operands are vectors, leading axes broadcast as batches."""
    return MatMul.apply(a, b)
