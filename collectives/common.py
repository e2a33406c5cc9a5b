"""What every algorithm shares: the reduction ops, the split of a vector into blocks, message tags.

Ops are NumPy ufuncs applied in place into preallocated buffers (``np.add(a, b, out=a)``), so an
algorithm allocates its result once and never copies a block it does not have to.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import numpy as np

OPS: dict[str, np.ufunc] = {"sum": np.add, "prod": np.multiply, "max": np.maximum, "min": np.minimum}

# Point-to-point tags, one per phase, so a message of one phase can never be taken for another's
# (MPI keeps them apart from the user's own messages only if the user passes a dup'ed communicator).
TAG_CHECK = 1  # the agreement handshake on shape, dtype and op (check.py), with short recursive doubling's data
TAG_FOLD = 2  # non-power-of-two ranks folded in and out (pof2.py)
TAG_GATHER = 3  # linear gather to the root (naive.py)
TAG_SCATTER = 4  # linear scatter from the root (naive.py)
TAG_REDUCE = 5  # binomial reduce (tree.py)
TAG_BCAST = 6  # binomial broadcast (tree.py)
TAG_REDUCE_SCATTER = 7  # ring or recursive-halving reduce-scatter
TAG_ALLGATHER = 8  # ring or recursive-doubling allgather
TAG_EXCHANGE = 9  # recursive-doubling allreduce (whole vectors)
TAG_HEADERS = 10  # every rank's header, after a failed handshake or for broadcast and scatter (check.py)


def reduction(op: str, dtype: np.dtype) -> np.ufunc:
    """The ufunc of ``op`` after checking that it means something for ``dtype``.

    Integers and floats take all four ops; complex numbers have no order (no max/min); for bool,
    NumPy's add is a logical or, not a count, so sum/prod are refused while max (any) and min (all)
    are allowed. Anything else (object, strings, datetimes) is not a number to reduce.

    An op that is not a name but an object marked ``traced`` (trace.py's stand-in for a ufunc,
    which counts the bytes it would reduce and computes nothing) is returned as it is.
    """
    if getattr(op, "traced", False):
        return op  # type: ignore[return-value]
    return _reduction(op, dtype)


@functools.lru_cache(maxsize=256)
def _reduction(op: str, dtype: np.dtype) -> np.ufunc:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}: expected one of {', '.join(OPS)}")
    dtype = np.dtype(dtype)
    if dtype.kind == "c" and op in ("max", "min"):
        raise TypeError(f"op {op!r} is not defined for complex dtype {dtype}: complex numbers have no order")
    if dtype.kind == "b" and op in ("sum", "prod"):
        raise TypeError(
            f"op {op!r} is not defined for bool arrays (NumPy would compute a logical or/and, not a number): "
            "cast to an integer dtype, or use 'max' for any / 'min' for all"
        )
    if dtype.kind not in "biufc":
        raise TypeError(f"dtype {dtype} is not numeric: collectives reduce bool, integer, float and complex arrays")
    return OPS[op]


def block_bounds(n: int, parts: int) -> list[int]:
    """Offsets splitting n elements into ``parts`` blocks as np.array_split does.

    Block i is [b[i], b[i+1]) with n // parts elements, plus one for the first n % parts blocks;
    blocks may be empty when n < parts.
    """
    q, r = divmod(n, parts)
    return [i * q + min(i, r) for i in range(parts + 1)]


def combine(
    f: np.ufunc, mine: np.ndarray, theirs: np.ndarray, theirs_is_lower: bool, out: np.ndarray | None = None
) -> np.ndarray:
    """f(lower, upper) into ``out`` (a new array if None): the operands always in rank order.

    Both ranks of an exchange then compute exactly the same bits (even for NaN payloads and
    signed zeros, where f(a, b) and f(b, a) may differ), so their results stay bitwise identical.
    """
    return f(theirs, mine, out=out) if theirs_is_lower else f(mine, theirs, out=out)


def waitall(requests: Sequence) -> None:
    """Wait for every request (mpi4py's Request.Waitall, written so it works on any communicator)."""
    for request in requests:
        request.Wait()
