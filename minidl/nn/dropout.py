"""Inverted dropout: in training, y = x * m / (1 - p) with m ~ Bernoulli(1 - p); in eval, y = x.

Scaling at training time keeps E[y] = x, so evaluation needs no rescaling (Srivastava et al. 2014).
"""

from __future__ import annotations

import numpy as np

from minidl.nn.module import Module
from minidl.random import default_generator
from minidl.tensor import Function, Tensor


class DropoutFunction(Function):
    """y = x * mask, where mask holds 0 or 1 / (1 - p);  dx = dy * mask."""

    def forward(self, x, *, mask):
        self.mask = mask
        return x * mask

    def backward(self, g):
        return g * self.mask


def dropout_mask(shape: tuple[int, ...], p: float, dtype, rng: np.random.Generator | None = None) -> np.ndarray:
    """An inverted-dropout mask: 0 with probability p, else 1 / (1 - p)."""
    rng = rng if rng is not None else default_generator()
    if p >= 1.0:
        return np.zeros(shape, dtype=dtype)
    keep = rng.random(shape, dtype=np.float64 if np.dtype(dtype) == np.float64 else np.float32) >= p
    return keep.astype(dtype) * np.asarray(1.0 / (1.0 - p), dtype=dtype)


def dropout(x: Tensor, p: float = 0.5, training: bool = True, rng: np.random.Generator | None = None) -> Tensor:
    """Inverted dropout of x; the identity when not training or p == 0.

    ``rng`` (an np.random.Generator) makes the mask reproducible; the default is the library's
    generator, reseeded by ``minidl.manual_seed``.
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout: probability must be in [0, 1], got {p}")
    if not training or p == 0.0:
        return x
    return DropoutFunction.apply(x, mask=dropout_mask(x.shape, p, x.dtype, rng))


class Dropout(Module):
    """Dropout(p=0.5): zeroes each element with probability p in training mode; identity in eval mode."""

    def __init__(self, p: float = 0.5, rng: np.random.Generator | None = None):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"Dropout: probability must be in [0, 1], got {p}")
        self.p, self.rng = p, rng

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training, self.rng)

    def extra_repr(self) -> str:
        return f"p={self.p}"
