"""Comparisons and arg-extrema: boolean or integer results, so no gradient (the graph stops here).

``a == b`` on tensors compares elementwise and returns a boolean Tensor, as in PyTorch and NumPy; Tensors stay
hashable by identity, so sets and dicts of tensors work as before (``t in list`` compares with ``==``: use
``any(t is u for u in list)`` for identity).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.tensor import Tensor


def _values(x: Any) -> Any:
    return x.data if isinstance(x, Tensor) else x


def _compare(op: Any, a: Any, b: Any) -> Tensor:
    a, b = _values(a), _values(b)
    try:
        return Tensor(np.asarray(op(a, b)))
    except ValueError:
        raise ValueError(
            f"{op.__name__}: shapes {np.shape(a)} and {np.shape(b)} cannot be broadcast together"
        ) from None


def eq(a: Any, b: Any) -> Tensor:
    return _compare(np.equal, a, b)


def ne(a: Any, b: Any) -> Tensor:
    return _compare(np.not_equal, a, b)


def lt(a: Any, b: Any) -> Tensor:
    return _compare(np.less, a, b)


def le(a: Any, b: Any) -> Tensor:
    return _compare(np.less_equal, a, b)


def gt(a: Any, b: Any) -> Tensor:
    return _compare(np.greater, a, b)


def ge(a: Any, b: Any) -> Tensor:
    return _compare(np.greater_equal, a, b)


def argmax(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index of the largest value (over the flattened tensor when axis is None)."""
    return Tensor(np.argmax(_values(x), axis=axis, keepdims=keepdims))


def argmin(x: Any, axis: int | None = None, keepdims: bool = False) -> Tensor:
    return Tensor(np.argmin(_values(x), axis=axis, keepdims=keepdims))
