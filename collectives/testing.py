"""The property-test kit: test your own collective the way minidl tests its own.

    from collectives.testing import allreduce_property

    def my_allreduce(comm, x, f):        # ring.py's signature: flat x, a ufunc f; return a new array
        ...

    def test_my_allreduce():             # pytest
        allreduce_property(my_allreduce) # ranks 1..16, n 0..30,000, every dtype, op and layout

or from a shell: ``python -m collectives.check my_ring.py:my_allreduce --collective allreduce``.

``check(fn, collective)`` draws cases with hypothesis (cases.py: p, n, dtype, op, root, rank layout,
value range), runs ``fn`` on in-process ranks with synchronous sends (run.py) and checks every
property (``PROPERTIES``). On the first failure hypothesis shrinks the case to the smallest that
still fails, and ``PropertyFailure`` carries the report (report.py): the property, the case, each
rank's input, expected against got, the first wrong rank and element, the step table of the
messages and a space-time diagram. The signatures of the collectives are in spec.py's table.

The pieces are public too, for a user's own ``@given`` test: the strategies (``cases``, ``ranks``,
``sizes``, ``dtypes``, ``ops``, ``layouts``), ``run_case(fn, case)`` -> ``Outcome`` and ``rank_data``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

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
from collectives.kit.spec import COLLECTIVES, cases

SUPPORTED_KINDS = {op: kinds for op, kinds in OP_KINDS.items() if op in ("sum", "prod", "max", "min")}


@dataclass
class Report:
    """A check that passed: how many examples ran and how long it took."""

    collective: str
    examples: int
    seconds: float

    def __str__(self) -> str:
        return f"{self.collective}: every property held on {self.examples} examples ({self.seconds:.1f} s)"


class _Failed(Exception):
    def __init__(self, outcome: Outcome):
        super().__init__(outcome.failures[0][0])
        self.outcome = outcome


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
    max_ranks, examples, seed: the world sizes drawn (1..max_ranks), how many cases, and hypothesis'
        seed (None: a fresh one each run). inplace: check the in-place form (allreduce, allgather).
    cost: a ``Cost``, or the name of a package algorithm ("ring") whose cost model it must meet.
    timeout: seconds one case may run before it counts as hung. diagram: where the failure's
        space-time diagram goes (a PNG; default a temporary file; "" for none).
    dtypes, ops, layouts: narrow the domain (names as in DTYPES, OP_KINDS, LAYOUTS). large: draw n over 10,000.
    """
    from hypothesis import HealthCheck, Phase, example, given, settings
    from hypothesis import seed as hypothesis_seed

    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if inplace and not COLLECTIVES[collective].inplace:
        raise ValueError(f"{collective} has no in-place form (only {[c for c, s in COLLECTIVES.items() if s.inplace]})")
    declared = Cost.of(cost) if isinstance(cost, str) else cost
    strategy = cases(
        collective, max_ranks, dtype_names=dtypes, op_names=ops, layout_names=layouts, large=large, inplace=inplace
    )
    count = 0

    def prop(case: Case) -> None:
        nonlocal count
        count += 1
        outcome = run_case(fn, case, timeout=timeout, cost=declared)
        if not outcome.ok:
            raise _Failed(outcome)

    first_dtype = (dtypes or DTYPES)[0] if dtypes else "float64"
    first_op = ops[0] if ops else None
    for case in reversed(edge_cases(collective, inplace, first_dtype, first_op)):
        prop = example(case)(prop)
    test = settings(
        max_examples=examples,
        deadline=None,
        database=None,
        report_multiple_bugs=False,
        phases=[Phase.explicit, Phase.generate, Phase.shrink],
        suppress_health_check=list(HealthCheck),
        print_blob=False,
    )(given(strategy)(prop))
    if seed is not None:
        test = hypothesis_seed(seed)(test)
    start = time.perf_counter()
    try:
        test()
    except _Failed as failed:
        raise describe_failure(fn, failed.outcome, diagram) from None
    return Report(collective, count, time.perf_counter() - start)


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
