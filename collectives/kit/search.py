"""How ``check`` looks for a failing case and makes it small: uniform draws, then greedy shrinking.

The search draws every field of a case uniformly from its domain (``Domain``): p from 1..16, the
layout, the dtype, the op, the root, the value range, and n from size classes chosen with equal
weight (0, 1, below p, not divisible by p, up to 64, the powers of two 2^7..2^14 and their
neighbours, between them, and 10,001..30,003). Uniform on purpose: a bug in float16 at p = 13
must be as likely to be drawn as one in int64 at p = 2, and a general-purpose generator (hypothesis'
``cases()`` strategy, kept for users' own ``@given`` tests) spends half its examples on the simplest
values. The generator is seeded, so a run is repeatable, and under MPI every rank draws the same cases.

A failing case is then shrunk greedily, as delta debugging does (Zeller and Hildebrandt,
"Simplifying and Isolating Failure-Inducing Input", 2002): try smaller p, the world layout,
smaller n, plain values, root 0, a plainer op and dtype, one change at a time; keep any change
after which the case still fails; stop when none does.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.kit.cases import (
    DTYPES,
    LARGE,
    LAYOUTS,
    OP_KINDS,
    Case,
    _st,
    np_dtype,
    ops_for,
    ranks,
    sizes,
    value_kinds,
)
from collectives.kit.spec import COLLECTIVES

SEARCH_LIMIT = 200  # cases tried while shrinking, at most
PLAIN_DTYPES = ["float64", "int64"]  # the dtypes a shrunk case prefers, plainest first


@dataclass(frozen=True)
class Domain:
    """What may be drawn for one collective: its dtypes, ops (None for data movement), layouts, sizes."""

    collective: str
    reduces: bool
    rooted: bool
    dtypes: tuple[str, ...] = tuple(DTYPES)
    ops: tuple[str, ...] = tuple(OP_KINDS)
    layouts: tuple[str, ...] = LAYOUTS
    large: bool = True
    inplace: bool = False
    min_ranks: int = 1
    min_n: int | str = 0  # "p": at least as many elements as ranks

    @staticmethod
    def of(
        collective: str,
        dtypes: Sequence[str] | None = None,
        ops: Sequence[str] | None = None,
        layouts: Sequence[str] | None = None,
        large: bool = True,
        inplace: bool = False,
        min_ranks: int = 1,
        min_n: int | str = 0,
        rooted: bool = True,
    ) -> Domain:
        spec = COLLECTIVES[collective]
        unknown = [d for d in dtypes or () if d not in DTYPES]
        if unknown:
            raise ValueError(f"unknown dtype {unknown[0]!r}: expected some of {', '.join(DTYPES)}")
        unknown = [o for o in ops or () if o not in OP_KINDS]
        if unknown:
            raise ValueError(f"unknown op {unknown[0]!r}: expected some of {', '.join(OP_KINDS)}")
        unknown = [x for x in layouts or () if x not in LAYOUTS]
        if unknown:
            raise ValueError(f"unknown layout {unknown[0]!r}: expected some of {', '.join(LAYOUTS)}")
        names = [d for d in (dtypes or DTYPES) if spec.reduces or not d.startswith("pair:")]
        if spec.reduces:
            names = [d for d in names if ops_for(d, ops)]
        if not names:
            raise ValueError(f"no dtype of {list(dtypes or DTYPES)} fits {collective} with ops {list(ops or [])}")
        return Domain(
            collective, spec.reduces, spec.rooted and rooted, tuple(names), tuple(ops or OP_KINDS),
            tuple(layouts or LAYOUTS), large, inplace, min_ranks, min_n,
        )  # fmt: skip

    def least_n(self, p: int) -> int:
        """The smallest n the contract allows at p."""
        return p if self.min_n == "p" else int(self.min_n)

    def allows(self, case: Case) -> bool:
        return case.p >= self.min_ranks and case.n >= self.least_n(case.p)

    def contract(self) -> str:
        """The contract judged, in words: 'the full contract' or what it was narrowed to."""
        parts = []
        if self.dtypes != tuple(d for d in DTYPES if self.reduces or not d.startswith("pair:")):
            parts.append("dtypes " + ",".join(self.dtypes))
        if self.reduces and self.ops != tuple(OP_KINDS):
            parts.append("ops " + ",".join(self.ops))
        if self.layouts != LAYOUTS:
            parts.append("layouts " + ",".join(self.layouts))
        if self.min_ranks > 1:
            parts.append(f"p >= {self.min_ranks}")
        if self.min_n not in (0, "0"):
            parts.append(f"n >= {self.min_n}")
        if COLLECTIVES[self.collective].rooted and not self.rooted:
            parts.append("root 0")
        return "the full contract" if not parts else "the contract " + "; ".join(parts)


def size_classes(p: int, rng: np.random.Generator, large: bool = True) -> list[int]:
    """One n from each size class, for this p; a case takes one class with equal weight."""
    remainder = 1 + int(rng.integers(0, max(p - 1, 1)))  # 1..p-1: not divisible by p
    classes = [
        0,
        1,
        int(rng.integers(0, p)),
        p * int(rng.integers(1, 9)) + remainder * (p > 1),
        int(rng.integers(0, 65)),
    ]
    if large:
        k = int(rng.integers(7, 15))
        classes += [2**k + int(rng.integers(-1, 2)), int(rng.integers(2**k, 2 ** (k + 1) + 1))]
        classes.append(int(rng.integers(LARGE, 3 * LARGE + 1)))
    return classes


BEYOND = 0.1  # the share of cases drawn past max_ranks (up to twice it), where only a large p breaks
HUGE = 0.08  # the share of cases drawn with 512 KiB..2 MiB a rank (where MPI libraries change protocol), at p <= 8


def draw(
    rng: np.random.Generator, domain: Domain, max_ranks: int = 16, p: int | None = None, beyond: bool = False
) -> Case:
    """One case, every field uniform over the domain (``p`` fixed under MPI); with ``beyond``, now and
    then a p in max_ranks+1..2 max_ranks."""
    if p is None and beyond and rng.random() < BEYOND:
        p = int(rng.integers(max_ranks + 1, 2 * max_ranks + 1))
    elif p is None:
        p = int(rng.integers(min(domain.min_ranks, max_ranks), max_ranks + 1))
    layout = str(rng.choice(domain.layouts))
    dtype = str(rng.choice(domain.dtypes))
    op = str(rng.choice(ops_for(dtype, domain.ops))) if domain.reduces else None
    classes = size_classes(p, rng, domain.large)
    n = classes[int(rng.integers(0, len(classes)))]
    if domain.large and p <= 8 and rng.random() < HUGE:  # by bytes: past 512 KiB in any dtype
        n = int(rng.integers(2**19, 2**21 + 1)) // np_dtype(dtype).itemsize
    n = max(n, domain.least_n(p))
    root = int(rng.integers(0, p)) if domain.rooted else 0
    values = str(rng.choice(value_kinds(dtype, op)))
    seed = int(rng.integers(0, 2**32))
    return Case(domain.collective, p, n, dtype, op, root, layout, values, seed, domain.inplace)


def smaller(case: Case, domain: Domain, shrink_p: bool = True) -> Iterator[Case]:
    """Simpler neighbours of a case, simplest first: one field changed each (p with the layout together
    too), within the domain's contract."""
    for candidate in _smaller(case, domain, shrink_p):
        if domain.allows(candidate):
            yield candidate


def _smaller(case: Case, domain: Domain, shrink_p: bool) -> Iterator[Case]:
    if shrink_p:
        for p in sorted({1, 2, 3, case.p // 2, case.p - 1}):
            if 1 <= p < case.p:  # a root other than 0 may matter: keep one where the smaller p allows
                for root in sorted({case.root % p, min(case.root, p - 1), min(case.root, 1, p - 1)}):
                    yield case.with_(p=p, root=root)
                    if case.layout != "world" and "world" in domain.layouts:
                        yield case.with_(p=p, root=root, layout="world")
                if case.n > domain.least_n(p) and case.n > domain.least_n(case.p):  # n scaled with p
                    yield case.with_(p=p, root=min(case.root, p - 1), n=max(domain.least_n(p), case.n * p // case.p))
    if case.layout != "world" and "world" in domain.layouts:
        yield case.with_(layout="world")
    for n in sorted({0, 1, 2, 3, case.p - 1, case.p + 1, case.n // 2, case.n - 1}):
        if 0 <= n < case.n:
            yield case.with_(n=n)
    if case.values != "uniform":
        yield case.with_(values="uniform")
    if case.root != 0:
        yield case.with_(root=0)
    plain_ops = [o for o in ("sum", "max") if o in ops_for(case.dtype, domain.ops)]
    if case.op is not None and plain_ops and case.op not in plain_ops:
        yield case.with_(op=plain_ops[0])
    plain = [d for d in PLAIN_DTYPES if d in domain.dtypes and (case.op is None or case.op in ops_for(d))]
    for dtype in plain[: plain.index(case.dtype)] if case.dtype in plain else plain:  # only toward the front
        yield case.with_(dtype=dtype, values="uniform")


def shrink(case: Case, fails: Callable[[Case], bool], domain: Domain, shrink_p: bool = True) -> Case:
    """The smallest case reached from ``case`` by simpler neighbours that still fail.

    ``fails`` decides what counts as the same failure (``check``: the same first property broken).
    Every step makes the case strictly simpler (fewer ranks, fewer elements, or a field moved toward
    its plain value), so the search ends; SEARCH_LIMIT bounds it on a slow function.
    """
    tried = 0
    improved = True
    while improved and tried < SEARCH_LIMIT:
        improved = False
        for candidate in smaller(case, domain, shrink_p):
            tried += 1
            if fails(candidate):
                case, improved = candidate, True
                break
    return case


def cases(
    collective: str = "allreduce",
    max_ranks: int = 16,
    *,
    dtype_names: Sequence[str] | None = None,
    op_names: Sequence[str] | None = None,
    layout_names: Sequence[str] | None = None,
    large: bool = True,
    inplace: bool = False,
) -> Any:
    """A hypothesis strategy for whole ``Case`` s of ``collective``, for a user's own ``@given`` test.

    The same domain as ``check`` draws from; hypothesis shrinks what it finds.
    """
    st, domain = _st(), Domain.of(collective, dtype_names, op_names, layout_names, large, inplace)

    @st.composite
    def draw_case(draw: Any) -> Case:
        p = draw(ranks(max_ranks))
        layout = draw(st.sampled_from(domain.layouts))
        dtype = draw(st.sampled_from(domain.dtypes))
        op = draw(st.sampled_from(ops_for(dtype, domain.ops))) if domain.reduces else None
        n = draw(sizes(p, large))
        root = draw(st.integers(0, p - 1)) if domain.rooted else 0
        values = draw(st.sampled_from(value_kinds(dtype, op)))
        return Case(collective, p, n, dtype, op, root, layout, values, draw(st.integers(0, 2**32 - 1)), inplace)

    return draw_case()
