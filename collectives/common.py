"""What every algorithm shares: the reduction ops, the split of a vector into blocks, message tags.

Ops are applied in place into preallocated buffers (``np.add(a, b, out=a)``), so an algorithm
allocates its result once and never copies a block it does not have to. Every op here is
commutative and associative (up to rounding for floats), as MPI's predefined ops are.

    op        ufunc                 dtypes                 meaning (MPI name)
    sum       np.add                int, uint, float, cpx  MPI_SUM; integers wrap round (see below)
    prod      np.multiply           int, uint, float, cpx  MPI_PROD; integers wrap round
    max, min  np.maximum, minimum   bool, int, uint, float MPI_MAX, MPI_MIN (bool: any, all)
    land, lor, lxor   np.logical_*  bool, int, uint        MPI_LAND, ...: 1 if true, else 0, in x's dtype
                                                           (over one rank x itself, as in MPI)
    band, bor, bxor   np.bitwise_*  bool, int, uint        MPI_BAND, ...: bit by bit
    maxloc, minloc    loc.py        (value, index) pairs   MPI_MAXLOC, MPI_MINLOC: see loc.py

Integer sums and products that overflow wrap round modulo 2^bits, as NumPy's arrays do and as
MPI's do in practice (two's complement): int8 100 + 100 gives -56 on every rank, bit for bit what
MPI_Allreduce gives (the MPI tests check it). Wrapping is exact in any order, so integer results
never depend on the algorithm. Cast to a wider dtype first if the true sum matters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

Op = Callable[..., Any]  # f(a, b, out=None): a ufunc, or loc.py's pair reductions

OPS: dict[str, Any] = {
    "sum": np.add,
    "prod": np.multiply,
    "max": np.maximum,
    "min": np.minimum,
    "land": np.logical_and,
    "lor": np.logical_or,
    "lxor": np.logical_xor,
    "band": np.bitwise_and,
    "bor": np.bitwise_or,
    "bxor": np.bitwise_xor,
    "maxloc": None,  # filled in by loc.py (it imports this module)
    "minloc": None,
}
LOGICAL = ("land", "lor", "lxor", "band", "bor", "bxor")  # integer and bool dtypes only, as in MPI

# Point-to-point tags, one per phase, so a message of one phase can never be taken for another's
# (MPI keeps them apart from the user's own messages only if the user passes a dup'ed communicator).
TAG_CHECK = 1  # the agreement handshake on shape, dtype and op (agreement.py), with short vectors' data
TAG_FOLD = 2  # non-power-of-two ranks folded in and out (fold.py)
TAG_GATHER = 3  # linear gather to the root (naive.py)
TAG_SCATTER = 4  # linear scatter from the root (naive.py)
TAG_REDUCE = 5  # binomial reduce (tree.py)
TAG_BCAST = 6  # binomial broadcast (tree.py)
TAG_REDUCE_SCATTER = 7  # ring or recursive-halving reduce-scatter
TAG_ALLGATHER = 8  # ring or recursive-doubling allgather
TAG_EXCHANGE = 9  # recursive-doubling allreduce (whole vectors)
TAG_HEADERS = 10  # every rank's header, after a failed handshake or for broadcast and scatter (agreement.py)
TAG_BARRIER = 11  # dissemination barrier (barrier.py)
TAG_ALLTOALL = 12  # pairwise exchange and Bruck's alltoall (alltoall.py)
TAG_SCAN = 13  # recursive-doubling prefix (scan.py)
TAG_COUNTS = 14  # the counts of the v-collectives (varying.py)
PHASES = {  # the phase of an allreduce a message belongs to, by its tag (explain's tables, the diagrams' colours)
    TAG_FOLD: "fold",
    TAG_GATHER: "gather",
    TAG_REDUCE: "reduce",
    TAG_BCAST: "broadcast",
    TAG_REDUCE_SCATTER: "reduce-scatter",
    TAG_ALLGATHER: "allgather",
    TAG_EXCHANGE: "exchange",
}


def reduction(op: str, dtype: np.dtype) -> Op:
    """The function of ``op`` after checking that it means something for ``dtype``.

    Integers and floats take the four arithmetic ops; complex numbers have no order (no max/min);
    for bool, NumPy's add is a logical or, not a count, so sum/prod are refused while max (any) and
    min (all) are allowed. The logical and bitwise ops take bool and integers (MPI: C integer and
    logical types). maxloc/minloc take the (value, index) pairs of loc.py. Anything else (object,
    strings, datetimes) is not a number to reduce.

    An op that is not a name but an object marked ``traced`` (trace.py's stand-in for a ufunc,
    which counts the bytes it would reduce and computes nothing) is returned as it is.
    """
    if getattr(op, "traced", False):
        return op  # type: ignore[return-value]
    return _reduction(op, dtype)


@functools.lru_cache(maxsize=256)
def _reduction(op: str, dtype: np.dtype) -> Op:
    if op not in OPS:
        raise ValueError(f"unknown op {op!r}: expected one of {', '.join(OPS)}")
    dtype = np.dtype(dtype)
    if op in ("maxloc", "minloc"):
        check_pairs(dtype, op)
        return OPS[op]
    if dtype.names is not None or dtype.kind not in "biufc":
        raise TypeError(f"dtype {dtype} is not numeric: collectives reduce bool, integer, float and complex arrays")
    if op in LOGICAL and dtype.kind not in "biu":
        raise TypeError(f"op {op!r} is defined for bool and integer arrays only (as in MPI), not {dtype}")
    if dtype.kind == "c" and op in ("max", "min"):
        raise TypeError(f"op {op!r} is not defined for complex dtype {dtype}: complex numbers have no order")
    if dtype.kind == "b" and op in ("sum", "prod"):
        raise TypeError(
            f"op {op!r} is not defined for bool arrays (NumPy would compute a logical or/and, not a number): "
            "cast to an integer dtype, or use 'max' for any / 'min' for all"
        )
    return OPS[op]


def check_pairs(dtype: np.dtype, op: str) -> None:
    """Raise TypeError unless dtype is a (value, index) pair of a real number and an integer (for loc.py's ops)."""
    names = dtype.names or ()
    if set(names) != {"value", "index"} or len(names) != 2:
        raise TypeError(
            f"op {op!r} needs (value, index) pairs: a structured array with fields 'value' and 'index' "
            f"(collectives.pairs(values, index)), not dtype {dtype}"
        )
    if dtype["value"].kind not in "iuf" or dtype["index"].kind not in "iu":
        raise TypeError(f"op {op!r}: 'value' must be an integer or float and 'index' an integer, got {dtype}")


def block_bounds(n: int, parts: int) -> list[int]:
    """Offsets splitting n elements into ``parts`` blocks as np.array_split does.

    Block i is [b[i], b[i+1]) with n // parts elements, plus one for the first n % parts blocks;
    blocks may be empty when n < parts.
    """
    q, r = divmod(n, parts)
    return [i * q + min(i, r) for i in range(parts + 1)]


def bounds_of(counts: Sequence[int]) -> list[int]:
    """Offsets of blocks of the given sizes: [0, c0, c0 + c1, ...]."""
    out = [0]
    for c in counts:
        out.append(out[-1] + int(c))
    return out


def combine(f: Op, mine: np.ndarray, theirs: np.ndarray, theirs_is_lower: bool, out: np.ndarray | None = None):
    """f(lower, upper) into ``out`` (a new array of mine's dtype if None): the operands always in rank order.

    Both ranks of an exchange then compute exactly the same bits (even for NaN payloads and
    signed zeros, where f(a, b) and f(b, a) may differ), so their results stay bitwise identical.
    The result keeps the operands' dtype (a logical op would otherwise return bool).
    """
    out = np.empty_like(mine) if out is None else out
    return f(theirs, mine, out=out) if theirs_is_lower else f(mine, theirs, out=out)


def waitall(requests: Sequence) -> None:
    """Wait for every request (mpi4py's Request.Waitall, written so it works on any communicator)."""
    for request in requests:
        request.Wait()
