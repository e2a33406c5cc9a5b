"""maxloc and minloc: the largest (smallest) value and where it came from, as MPI_MAXLOC / MPI_MINLOC.

The array convention: a NumPy structured array with two fields, ``value`` (any integer or float
dtype) and ``index`` (any integer dtype), one (value, index) pair per element, of any shape. Build
one with ``pairs(values, index)``; the index is usually the rank (where is the largest loss?) or a
global position. The reduction compares pairs elementwise:

    maxloc((u, i), (v, j)) = (u, i) if u > v;  (v, j) if v > u;  (u, min(i, j)) if u == v
    minloc likewise with <.

Ties go to the smaller index, so the op is commutative and associative and every algorithm gives
the same pairs on every rank. NaN values compare false both ways (then the pair with the smaller
index wins, whatever the order: deterministic, but a NaN is not treated as a maximum).

On the wire the pairs travel as raw bytes (collectives/wire_format.py): mpi4py has no MPI datatype for a NumPy
structured dtype, and the bytes are the same on every rank of one machine type. Against MPI's own
MAXLOC (tests/mpi) the pairs are laid out as MPI's C structs: ``pairs(v, i, mpi_layout=True)``.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import common
from collectives.wire_format import BytesComm, wire  # noqa: F401  (their old place)


def pairs(values: Any, index: Any, mpi_layout: bool = False) -> np.ndarray:
    """A (value, index) structured array of ``values``' shape (``index`` broadcast to it).

    Fields: ``value`` in values' dtype, ``index`` int64 (int32 with ``mpi_layout``, aligned as
    MPI's C structs float_int, double_int, long_int, 2int).
    """
    values = np.asarray(values)
    index_dtype = np.int32 if mpi_layout else np.int64
    dtype = np.dtype([("value", values.dtype), ("index", index_dtype)], align=mpi_layout)
    out = np.empty(values.shape, dtype)
    out["value"], out["index"] = values, index
    return out


class LocOp:
    """maxloc or minloc as a function f(a, b, out=None) on pair arrays, like a ufunc's call."""

    def __init__(self, name: str, better: np.ufunc):
        self.__name__, self.better = name, better

    def __call__(self, a: np.ndarray, b: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        va, vb = a["value"], b["value"]
        take_b = self.better(vb, va) | ((vb == va) & (b["index"] < a["index"]))
        taken = np.where(take_b, b, a)  # a new array: out may be a or b
        if out is None:
            return taken
        out[...] = taken
        return out

    def __repr__(self) -> str:
        return self.__name__


MAXLOC = common.OPS["maxloc"] = LocOp("maxloc", np.greater)
MINLOC = common.OPS["minloc"] = LocOp("minloc", np.less)
