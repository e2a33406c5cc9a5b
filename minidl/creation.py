"""Tensor factories, as PyTorch names them: zeros, ones, full, randn, eye, arange and the ``*_like`` forms.

Float results take the default dtype (float32 unless ``set_default_dtype`` changed it) unless ``dtype`` is given;
``arange`` over integers gives int64, as torch.arange does. A shape is given as ``f(2, 3)`` or ``f((2, 3))``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.ops.shape import shape_arg
from minidl.tensor import Tensor, get_default_dtype


def _float(dtype: Any) -> np.dtype:
    return np.dtype(dtype) if dtype is not None else get_default_dtype()


def zeros(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return Tensor(np.zeros(shape_arg(shape), _float(dtype)), requires_grad=requires_grad)


def ones(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    return Tensor(np.ones(shape_arg(shape), _float(dtype)), requires_grad=requires_grad)


def full(shape: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """A tensor of ``shape`` holding ``fill_value``; a bool or int fill gives that kind unless dtype says otherwise."""
    if dtype is None and isinstance(fill_value, bool | int | np.integer | np.bool_):
        dtype = np.bool_ if isinstance(fill_value, bool | np.bool_) else np.int64
    shape = (shape,) if isinstance(shape, int | np.integer) else tuple(shape)
    return Tensor(np.full(shape, fill_value, _float(dtype)), requires_grad=requires_grad)


def randn(*shape: Any, dtype: Any = None, requires_grad: bool = False, rng: Any = None) -> Tensor:
    """Standard normal values, from ``rng`` (a NumPy Generator) or a fresh one."""
    rng = rng if rng is not None else np.random.default_rng()
    return Tensor(rng.standard_normal(shape_arg(shape)).astype(_float(dtype)), requires_grad=requires_grad)


def eye(n: int, m: int | None = None, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """The n x m identity matrix (m = n by default)."""
    return Tensor(np.eye(n, m, dtype=_float(dtype)), requires_grad=requires_grad)


def arange(start: Any, end: Any = None, step: Any = 1, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """start, start + step, ... below end (``arange(n)``: 0..n-1). Integers give int64, floats the default dtype."""
    if end is None:
        start, end = 0, start
    if step == 0:
        raise ValueError("arange: step must be nonzero")
    if dtype is None:
        integral = all(isinstance(v, int | np.integer) for v in (start, end, step))
        dtype = np.int64 if integral else get_default_dtype()
    return Tensor(np.arange(start, end, step, dtype=np.dtype(dtype)), requires_grad=requires_grad)


def _like(x: Any, dtype: Any) -> tuple[tuple[int, ...], np.dtype]:
    arr = x.data if isinstance(x, Tensor) else np.asarray(x)
    return arr.shape, np.dtype(dtype) if dtype is not None else arr.dtype


def zeros_like(x: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    """Zeros of x's shape and (unless given) dtype."""
    shape, dt = _like(x, dtype)
    return Tensor(np.zeros(shape, dt), requires_grad=requires_grad)


def ones_like(x: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    shape, dt = _like(x, dtype)
    return Tensor(np.ones(shape, dt), requires_grad=requires_grad)


def full_like(x: Any, fill_value: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
    shape, dt = _like(x, dtype)
    return Tensor(np.full(shape, fill_value, dt), requires_grad=requires_grad)
