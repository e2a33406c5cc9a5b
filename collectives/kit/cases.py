"""What one example is (``Case``), the data each rank brings to it, and the hypothesis strategies that draw cases.

A case is small and printable: the world size p, the rank layout, the element count n, dtype, op,
root, value range and a seed. Every rank's arrays are made from (seed, world rank) alone
(``rank_data``), so shrinking changes p, n, dtype and op, never megabytes of drawn floats, and any
process (an MPI rank, the report) can rebuild any rank's input.

The domain is the one where collectives break (UCC's and MPICH's test suites, and the classic
student mistakes): p = 1..16 with the non-powers of two and p > 8; n = 0, 1, below p, not
divisible by p, and over 10,000 (past any segment threshold); every dtype the package reduces;
every op it has; every root; four rank layouts made with ``Split``; and values of wide dynamic
range, with which a summation order that differs between ranks changes the bits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from collectives.common import LOGICAL
from collectives.loc import pairs


def _st() -> Any:
    """hypothesis.strategies, imported when a strategy is first asked for (hypothesis is a test extra)."""
    try:
        from hypothesis import strategies
    except ImportError as exc:  # pragma: no cover
        raise ImportError("the property-test kit needs hypothesis: pip install hypothesis (or minidl[test])") from exc
    return strategies


DTYPES = (
    "int8 int16 int32 int64 uint8 uint16 uint32 uint64 float16 float32 float64 complex64 complex128 bool "
    "pair:float64 pair:int32"
).split()
# op -> the dtype kinds it is defined for (common.reduction's rules); "V": (value, index) pairs
OP_KINDS = {"sum": "iufc", "prod": "iufc", "max": "biuf", "min": "biuf", "maxloc": "V", "minloc": "V"}
OP_KINDS.update({op: "biu" for op in LOGICAL})
LAYOUTS = ("world", "reversed", "halves", "odd-even")
TRACE_BITS = 24  # traceable values: 2^rank + 2^24 i, so ranks below 24
LARGE = 10_001  # the smallest "large" count: past a 8 KiB or 10,000-element segment threshold


def np_dtype(name: str) -> np.dtype:
    """'float32' -> float32; 'pair:float64' -> the (value, index) structured dtype of collectives.pairs."""
    if name.startswith("pair:"):
        return pairs(np.zeros(0, name[5:]), 0).dtype
    return np.dtype(name)


@dataclass(frozen=True)
class Case:
    """One example. ``p`` is the world size; the layout splits it into groups that each run the collective.

    ``n`` is the element count of one rank's contribution (its vector, or one block of an alltoall or
    scatter); the v-variants draw each rank's count in [0, n] from the seed.
    """

    collective: str
    p: int
    n: int
    dtype: str = "float64"
    op: str | None = "sum"
    root: int = 0
    layout: str = "world"
    values: str = "uniform"
    seed: int = 0
    inplace: bool = False

    def __str__(self) -> str:
        op = f", op={self.op}" if self.op else ""
        inplace = ", in place" if self.inplace else ""
        return (
            f"{self.collective}: p={self.p} ({self.layout}), n={self.n}, dtype={self.dtype}{op}, root={self.root}, "
            f"values={self.values}, seed={self.seed}{inplace}"
        )

    def with_(self, **changes: Any) -> Case:
        return replace(self, **changes)


def groups(p: int, layout: str) -> list[list[int]]:
    """The world ranks of each group, in group-rank order, as ``Split`` makes them for the layout.

    world: one group 0..p-1; reversed: one group p-1..0 (key = -rank); halves: ranks below p // 2
    and the rest; odd-even: even ranks and odd ranks. A group is never empty.
    """
    if layout == "world":
        return [list(range(p))]
    if layout == "reversed":
        return [list(range(p - 1, -1, -1))]
    if layout == "halves":
        return [g for g in (list(range(p // 2)), list(range(p // 2, p))) if g]
    if layout == "odd-even":
        return [g for g in (list(range(0, p, 2)), list(range(1, p, 2))) if g]
    raise ValueError(f"unknown layout {layout!r}: expected one of {', '.join(LAYOUTS)}")


def split_args(p: int, layout: str, world_rank: int) -> tuple[int, int]:
    """(color, key) for ``comm.Split`` that puts ``world_rank`` in its group of ``groups(p, layout)``."""
    for color, members in enumerate(groups(p, layout)):
        if world_rank in members:
            return color, members.index(world_rank)
    raise ValueError(f"rank {world_rank} is not in a world of {p}")


def rank_data(
    seed: int, rank: int, shape: Any, dtype: Any, op: str | None = "sum", values: str = "uniform"
) -> np.ndarray:
    """Rank ``rank``'s array for example ``seed``: any process can make any rank's array.

    uniform: integers over their whole range (wrap-around is exact in any order), or odd ones for a
    product (so that products do not all wrap to 0); floats in [-4, 4]; complex likewise in both
    parts; bools at random. wide: floats of either sign with magnitudes 10^-k..10^k (k = 3 for
    float16, 8 otherwise), so sums in different orders round differently. special: as uniform, with
    about a third of the values signed zeros, infinities, NaN and subnormals (for the collectives that
    move data, and max/min), which a collective must carry bit for bit. Products take floats in
    [0.5, 1.5] either way, which neither overflow nor underflow over 16 ranks. Pairs (maxloc,
    minloc): values from a few small integers, so that ties between ranks are common, and random
    indices.
    """
    rng = np.random.default_rng([seed, rank])
    dt = np.dtype(dtype) if not isinstance(dtype, str) else np_dtype(dtype)
    if values == "traceable":  # explain's encoding: any partial sum names its ranks and element
        traced = (1 << rank) + (np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape) << TRACE_BITS)
        return traced.astype(np.float64) if dt == np.float64 else traced  # float64: exact below 2^53
    if dt.names is not None:
        out = np.empty(shape, dt)
        out["value"] = rng.integers(-3, 4, shape)
        out["index"] = rng.integers(0, 1000, shape)
        return out
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        x = rng.integers(info.min, info.max, shape, dtype=dt, endpoint=True)
        return x | dt.type(1) if op == "prod" else x
    shape = (shape,) if np.ndim(shape) == 0 else tuple(shape)
    if op == "prod":
        mags = rng.uniform(0.5, 1.5, (2, *shape))
    elif values == "special":
        mags = rng.uniform(-4.0, 4.0, (2, *shape))
        specials = [-0.0, 0.0, np.inf, -np.inf, np.nan, float(np.finfo(dt).smallest_subnormal), -1e-45]
        chosen = rng.random((2, *shape)) < 0.3
        mags[chosen] = rng.choice(specials, int(chosen.sum()))
    elif values == "wide":
        k = 3 if dt.itemsize <= 2 else 8  # float16's largest value is 65504
        mags = rng.choice([-1.0, 1.0], (2, *shape)) * 10.0 ** rng.uniform(-k, k, (2, *shape))
    else:
        mags = rng.uniform(-4.0, 4.0, (2, *shape))
    if dt.kind != "c":
        return mags[0].astype(dt)
    x = np.empty(shape, dt)
    x.real, x.imag = mags[0], mags[1]  # not mags[0] + 1j * mags[1]: 1j * inf would be nan + inf j
    return x


# -- strategies: each usable on its own in a user's @given ---------------------------------------------
def ranks(max_ranks: int = 16) -> Any:
    """World sizes 1..max_ranks; shrinks toward 1. Non-powers of two and p > 8 are drawn as often as the rest."""
    return _st().integers(1, max_ranks)


def sizes(p: int, large: bool = True) -> Any:
    """Element counts: 0, 1, below p, not divisible by p, small, and (``large``) 2^k - 1, 2^k, 2^k + 1 and
    between for k = 7..14, and over 10,000: every segment threshold is crossed from both sides. Shrinks toward 0."""
    st = _st()
    parts = [
        st.just(0),
        st.just(1),
        st.integers(0, max(p - 1, 0)),
        st.integers(1, 8).map(lambda k: k * p + 1 + k % max(p - 1, 1) if p > 1 else k),
        st.integers(0, 64),
    ]
    if large:  # thresholds sit at powers of two: each boundary, and anywhere between 2^7 and 2^15
        parts.append(st.integers(7, 14).flatmap(lambda k: st.sampled_from([2**k - 1, 2**k, 2**k + 1])))
        parts.append(st.integers(7, 14).flatmap(lambda k: st.integers(2**k, 2 ** (k + 1))))
        parts.append(st.integers(LARGE, 3 * LARGE))
    return st.one_of(*parts)


def dtypes(names: Any = None) -> Any:
    """dtype names (``np_dtype`` makes the dtype): every integer width, float16/32/64, complex, bool, pairs."""
    return _st().sampled_from(list(names or DTYPES))


def ops(dtype: str, names: Any = None) -> Any:
    """The ops defined for ``dtype`` (of ``names``, default all): sum, prod, max, min, logical, bitwise, maxloc/minloc."""
    allowed = ops_for(dtype, names)
    if not allowed:
        raise ValueError(f"no op of {list(names or OP_KINDS)} is defined for dtype {dtype}")
    return _st().sampled_from(allowed)


def layouts(names: Any = None) -> Any:
    """Rank layouts as UCC's tests make them: the world, reversed, split in halves, odd/even (through Split)."""
    return _st().sampled_from(list(names or LAYOUTS))


def ops_for(dtype: str, names: Sequence[str] | None = None) -> list[str]:
    """The ops of ``names`` (default all) defined for ``dtype`` (common.reduction's rules)."""
    kind = np_dtype(dtype).kind
    return [o for o in (names or OP_KINDS) if kind in OP_KINDS[o] and not (kind == "b" and o in ("sum", "prod"))]


def value_kinds(dtype: str, op: str | None) -> list[str]:
    """uniform and wide floats; special values (signed zeros, inf, NaN, subnormals) where no sum is formed."""
    if np_dtype(dtype).kind not in "fc":
        return ["uniform"]
    return ["uniform", "wide"] + ["special"] * (op in (None, "max", "min"))
