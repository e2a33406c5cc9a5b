"""In-place writes to a tensor's values (``t.add_(x)``, ``t.copy_(src)``, ...): not ops of the graph.

They are for values outside the graph (parameters in an update, buffers), so, as in PyTorch, a tensor that
requires grad may be written only under ``no_grad()``. Each write bumps the version of the tensor's memory, so a
backward that saved the old values refuses them (minidl/saved.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl import saved
from minidl.autograd import is_grad_enabled
from minidl.tensor import Tensor


def write_in_place(op: str, t: Tensor, ufunc: Any, other: Any) -> Tensor:
    """t = ufunc(t, other) in t's own memory; ``ufunc=None`` copies ``other`` in (broadcast to t's shape)."""
    if is_grad_enabled() and t.requires_grad:
        raise RuntimeError(f"{op}: an in-place op on a tensor that requires grad is not supported outside no_grad()")
    value = np.asarray(other.data if isinstance(other, Tensor) else other)
    saved.bump(t._data)
    if ufunc is None:
        np.copyto(t._data, value)
    else:
        ufunc(t._data, value, out=t._data)
    return t
