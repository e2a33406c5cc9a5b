"""The property-test kit: test your own collective the way minidl tests its own.

    from collectives.testing import allreduce_property

    def my_allreduce(comm, x, f):        # ring.py's signature: flat x, a ufunc f; return a new array
        ...

    def test_my_allreduce():             # pytest
        allreduce_property(my_allreduce) # ranks 1..16, n 0..30,000, every dtype, op and layout

or from a shell: ``python -m collectives.check my_ring.py:my_allreduce --collective allreduce``.

``check(fn, collective)`` draws cases uniformly over the domain (search.py: p, n, dtype, op, root,
rank layout, value range; the edge cases p = 1 and n = 0 first), runs ``fn`` twice on in-process
ranks with synchronous sends (run.py) and checks every property (``PROPERTIES``). The first failing
case is shrunk to the smallest that still fails, and ``PropertyFailure`` carries the report
(report.py): the property, the case, each rank's input, expected against got, the first wrong rank
and element, the step table of the messages and a space-time diagram. The signatures of the
collectives are in spec.py's table.

The pieces are public too, for a user's own hypothesis ``@given`` test: the strategies (``cases``,
``ranks``, ``sizes``, ``dtypes``, ``ops``, ``layouts``), ``run_case(fn, case)`` -> ``Outcome`` and ``rank_data``.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.kit.cases import (
    DTYPES,
    LAYOUTS,
    OP_KINDS,
    Case,
    dtypes,
    layouts,
    np_dtype,
    ops,
    rank_data,
    ranks,
    sizes,
)
from collectives.kit.report import PropertyFailure, describe_failure
from collectives.kit.run import PROPERTIES, Cost, Outcome, run_case
from collectives.kit.search import Domain, cases, draw, shrink
from collectives.kit.spec import COLLECTIVES

SUPPORTED_KINDS = {op: kinds for op, kinds in OP_KINDS.items() if op in ("sum", "prod", "max", "min")}


@dataclass
class Report:
    """A check that passed: how many examples ran and how long it took."""

    collective: str
    examples: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.collective}: every property held on {self.examples} examples ({self.seconds:.1f} s)"


RACE = (
    "note: this case passed when run again: the result depends on the order the ranks' threads ran in "
    "(a receive from ANY_SOURCE, or a wait on several requests, taken as if in rank order?)"
)


def edge_cases(collective: str, inplace: bool = False, dtype: str = "float64", op: str | None = None) -> list[Case]:
    """The cases checked before any drawn one: p = 1 and n = 0, and the smallest non-trivial ones."""
    spec, kind = COLLECTIVES[collective], np_dtype(dtype).kind
    if spec.reduces:
        op = op or next(o for o in OP_KINDS if kind in OP_KINDS[o] and not (kind == "b" and o in ("sum", "prod")))
    else:
        op = None
    return [Case(collective, p, n, dtype, op, inplace=inplace) for p, n in [(1, 0), (1, 3), (2, 0), (2, 1), (3, 2)]]


def check(
    fn: Callable[..., Any],
    collective: str = "allreduce",
    *,
    max_ranks: int = 16,
    examples: int = 100,
    seed: int | None = 0,
    inplace: bool = False,
    cost: Cost | str | None = None,
    timeout: float = 20.0,
    diagram: str | None = None,
    dtypes: Sequence[str] | None = None,
    ops: Sequence[str] | None = None,
    layouts: Sequence[str] | None = None,
    large: bool = True,
) -> Report:
    """Check every property of ``fn`` as ``collective`` on drawn cases; raise PropertyFailure on a failure.

    fn: the user's function, with the signature spec.py gives for ``collective`` (``COLLECTIVES``).
    max_ranks, examples, seed: the world sizes drawn (1..max_ranks), how many cases after the edge
        cases, and the search's seed (None: a fresh one, printed in the report).
    inplace: check the in-place form (allreduce, allgather).
    cost: a ``Cost``, or the name of a package algorithm ("ring") whose cost model it must meet.
    timeout: seconds one case may run before it counts as hung. diagram: where the failure's
        space-time diagram goes (a PNG; default a temporary file; "" for none).
    dtypes, ops, layouts: narrow the domain (names as in DTYPES, OP_KINDS, LAYOUTS). large: draw n past 128.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if inplace and not COLLECTIVES[collective].inplace:
        raise ValueError(f"{collective} has no in-place form (only {[c for c, s in COLLECTIVES.items() if s.inplace]})")
    domain = Domain.of(collective, dtypes, ops, layouts, large, inplace)
    declared = Cost.of(cost) if isinstance(cost, str) else cost
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed  # type: ignore[operator]
    rng = np.random.default_rng(seed)

    def run(case: Case) -> Outcome:
        return run_case(fn, case, timeout=timeout, cost=declared)

    start, count = time.perf_counter(), 0
    first = edge_cases(collective, inplace, domain.dtypes[0] if dtypes else "float64", ops[0] if ops else None)
    for case in itertools.chain(first, (draw(rng, domain, max_ranks) for _ in range(examples))):
        count += 1
        outcome = run(case)
        if not outcome.ok:
            raise _shrunk(fn, outcome, run, domain, diagram, f"search seed {seed}, case {count}", timeout)
    return Report(collective, count, time.perf_counter() - start)


def _shrunk(
    fn: Callable[..., Any],
    outcome: Outcome,
    run: Callable[[Case], Outcome],
    domain: Domain,
    diagram: str | None,
    found: str,
    timeout: float,
) -> PropertyFailure:
    """The report of the smallest failing case shrunk from ``outcome``'s."""
    last, broken = [outcome], outcome.failures[0][0]

    def fails(case: Case) -> bool:  # the same failure: the property that broke first still breaks
        tried = run(case)
        if broken in (prop for prop, _ in tried.failures):
            last.append(tried)
            return True
        return False

    small = shrink(outcome.case, fails, domain)
    notes = [f"found at {found} ({outcome.case}), then shrunk"]
    if run(small).ok:
        notes.append(RACE)
    return describe_failure(fn, last[-1], diagram, notes, timeout=min(timeout, 10.0))


def _property(collective: str) -> Callable[..., Report]:
    def prop(fn: Callable[..., Any], **kwargs: Any) -> Report:
        return check(fn, collective, **kwargs)

    prop.__name__ = prop.__qualname__ = f"{collective}_property"
    prop.__doc__ = (
        f"``check(fn, {collective!r}, **kwargs)``, fn being {COLLECTIVES[collective].signature}: for a pytest test."
    )
    return prop


allreduce_property = _property("allreduce")
reduce_property = _property("reduce")
broadcast_property = _property("broadcast")
reduce_scatter_property = _property("reduce_scatter")
reduce_scatterv_property = _property("reduce_scatterv")
allgather_property = _property("allgather")
allgatherv_property = _property("allgatherv")
gather_property = _property("gather")
gatherv_property = _property("gatherv")
scatter_property = _property("scatter")
scatterv_property = _property("scatterv")
alltoall_property = _property("alltoall")
alltoallv_property = _property("alltoallv")
scan_property = _property("scan")
exscan_property = _property("exscan")

__all__ = [
    "COLLECTIVES",
    "DTYPES",
    "LAYOUTS",
    "PROPERTIES",
    "SUPPORTED_KINDS",
    "Case",
    "Cost",
    "Outcome",
    "PropertyFailure",
    "Report",
    "cases",
    "check",
    "dtypes",
    "edge_cases",
    "layouts",
    "ops",
    "rank_data",
    "ranks",
    "run_case",
    "sizes",
] + [f"{name}_property" for name in COLLECTIVES]
