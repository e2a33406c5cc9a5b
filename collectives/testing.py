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
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.kit import roles as signature_roles
from collectives.kit.cases import (
    DTYPES,
    LAYOUTS,
    OP_KINDS,
    Case,
    dtypes,
    layouts,
    np_dtype,
    ops,
    ops_for,
    rank_data,
    ranks,
    sizes,
)
from collectives.kit.namespace import ModuleCopies
from collectives.kit.report import PropertyFailure, describe_failure
from collectives.kit.run import PROPERTIES, Cost, Outcome, run_case
from collectives.kit.search import Domain, cases, draw, shrink
from collectives.kit.spec import COLLECTIVES

SUPPORTED_KINDS = {op: kinds for op, kinds in OP_KINDS.items() if op in ("sum", "prod", "max", "min")}


MAX_THREADS = 256  # in-process ranks are threads: past this a case takes longer than a class can wait


@dataclass
class Report:
    """A check that passed: how many examples ran, how long it took, the contract and the p judged."""

    collective: str
    examples: int
    seconds: float
    contract: str = "the full contract"
    tried: str = ""
    note: str = ""

    def __str__(self) -> str:
        text = f"{self.collective}: every property held on {self.examples} examples ({self.seconds:.1f} s)"
        text += f"; {self.contract}" + (f", {self.tried}" if self.tried else "")
        return text + (f"\n{self.note}" if self.note else "")


def edge_cases(
    collective: str, inplace: bool = False, dtype: str = "float64", op: str | None = None, domain: Domain | None = None
) -> list[Case]:
    """The cases checked before any drawn one: p = 1 and n = 0, and the smallest non-trivial ones
    (those the domain's contract allows)."""
    spec, kind = COLLECTIVES[collective], np_dtype(dtype).kind
    if spec.reduces:
        op = op or next(o for o in OP_KINDS if kind in OP_KINDS[o] and not (kind == "b" and o in ("sum", "prod")))
    else:
        op = None
    first = [Case(collective, p, n, dtype, op, inplace=inplace) for p, n in [(1, 0), (1, 3), (2, 0), (2, 1), (3, 2)]]
    if domain is None:
        return first
    allowed = [c for c in first if domain.allows(c)]
    p = max(domain.min_ranks, 2)
    return allowed or [Case(collective, p, max(domain.least_n(p), 1), dtype, op, inplace=inplace)]


def pair_cases(domain: Domain) -> list[Case]:
    """Every (dtype, op) pair of the domain once, at a small p and n: a bug in one pair is never left to chance."""
    cases, i = [], 0
    for dtype in domain.dtypes:
        for op in ops_for(dtype, domain.ops) if domain.reduces else [None]:
            p = max(domain.min_ranks, 2 + i % 4)
            n = max(domain.least_n(p), p + 1 + i % 3)
            cases.append(Case(domain.collective, p, n, dtype, op, root=(p - 1) * domain.rooted, seed=1000 + i,
                              inplace=domain.inplace))  # fmt: skip
            i += 1
    return cases


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
    signature: str | Sequence[str] | None = None,
    min_ranks: int = 1,
    min_n: int | str = 0,
    beyond: bool = True,
) -> Report:
    """Check every property of ``fn`` as ``collective`` on drawn cases; raise PropertyFailure on a failure.

    fn: the user's function, with the signature spec.py gives for ``collective`` (``COLLECTIVES``),
        or the one ``signature`` names by role (roles.py: 'send,recv,comm,op').
    max_ranks, examples, seed: the world sizes drawn (1..max_ranks, and with ``beyond`` up to twice
        that in 10% of cases), how many cases after the edge cases and the (dtype, op) sweep, and the
        search's seed (None: a fresh one, printed in the report).
    inplace: check the in-place form (allreduce, allgather).
    cost: a ``Cost``, or the name of a package algorithm ("ring") whose cost model it must meet.
    timeout: seconds one case may run before it counts as hung. diagram: where the failure's
        space-time diagram goes (a PNG; default a temporary file; "" for none).
    dtypes, ops, layouts, min_ranks, min_n: a course's contract, narrower than the full one (names as in
        DTYPES, OP_KINDS, LAYOUTS; min_n an int or "p": at least as many elements as ranks).
        large: draw n past 128.
    Raises NotOffered (an AttributeError) when fn calls an mpi4py name the in-process ranks lack.
    """
    if collective not in COLLECTIVES:
        raise ValueError(f"unknown collective {collective!r}: expected one of {', '.join(COLLECTIVES)}")
    if inplace and not COLLECTIVES[collective].inplace:
        raise ValueError(f"{collective} has no in-place form (only {[c for c, s in COLLECTIVES.items() if s.inplace]})")
    _check_numbers(max_ranks, examples, timeout, min_ranks, min_n)
    roles = signature_roles.parse(signature, collective, inplace)
    if not signature_roles.contract_ops(roles) and COLLECTIVES[collective].reduces:
        ops = [(ops or ["sum"])[0]]  # the function takes no op: it is checked with one
    domain = Domain.of(
        collective, dtypes, ops, layouts, large, inplace, min_ranks, min_n, rooted=roles is None or "root" in roles
    )
    declared = Cost.of(cost) if isinstance(cost, str) else cost
    seed = int(np.random.SeedSequence().entropy % 2**32) if seed is None else seed  # type: ignore[operator]
    rng = np.random.default_rng(seed)
    copies = ModuleCopies(fn)

    def run(case: Case, fresh: bool = False) -> Outcome:  # fresh: new copies of the module, as a new job
        return run_case(fn, case, timeout=timeout, cost=declared, signature=roles, copies=None if fresh else copies)

    start, count = time.perf_counter(), 0
    dtype = domain.dtypes[0] if dtypes else "float64"
    first = edge_cases(collective, inplace, dtype, ops[0] if ops else None, domain) + pair_cases(domain)
    drawn = (draw(rng, domain, max_ranks, beyond=beyond) for _ in range(examples))
    for case in itertools.chain(first, drawn):
        count += 1
        outcome = run(case)
        if not outcome.ok:
            found = f"search seed {seed}, case {count}"
            raise _shrunk(fn, outcome, run, domain, diagram, found, timeout, roles)
    tried = f"p = {min_ranks}..{max_ranks}" + (f" (and up to {2 * max_ranks} in 10% of cases)" if beyond else "")
    tried += ", n up to 30,003 elements (and 512 KiB..2 MiB a rank in 8% of cases at p <= 8)" if large else ", n <= 64"
    return Report(collective, count, time.perf_counter() - start, domain.contract(), tried, copies.shared_note)


def _check_numbers(max_ranks: int, examples: int, timeout: float, min_ranks: int, min_n: int | str) -> None:
    if not isinstance(max_ranks, int) or not 1 <= max_ranks <= MAX_THREADS:
        raise ValueError(f"max_ranks must be an integer in 1..{MAX_THREADS} (threads of one process), got {max_ranks}")
    if not isinstance(examples, int) or examples < 0:
        raise ValueError(f"examples must be an integer >= 0, got {examples}")
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive number of seconds, got {timeout}")
    if not isinstance(min_ranks, int) or not 1 <= min_ranks <= max_ranks:
        raise ValueError(f"min_ranks must be in 1..max_ranks ({max_ranks}), got {min_ranks}")
    if min_n != "p" and not (isinstance(min_n, int) and min_n >= 0):
        raise ValueError(f"min_n must be an integer >= 0 or 'p', got {min_n!r}")


REPEATS = 5  # runs of a found case that tell a steady failure from an intermittent one
STALE = (
    "this case's first call is right on fresh ranks (new copies of the module) and wrong after the earlier cases' "
    "calls in the same processes: state kept between calls (a module global, a cached buffer, a counter) went stale"
)


def _shrunk(
    fn: Callable[..., Any],
    outcome: Outcome,
    run: Callable[..., Outcome],
    domain: Domain,
    diagram: str | None,
    found: str,
    timeout: float,
    roles: tuple[str, ...] | None = None,
) -> PropertyFailure:
    """The report of the smallest failing case shrunk from ``outcome``'s.

    The found case is run again: a failure that does not come back every time is intermittent (a
    race between the ranks' threads) and is reported as found, with how often it failed. A steady one
    is shrunk: a smaller case is kept only while the same property fails.
    """
    broken = outcome.failures[0][0]
    if broken == "repeatable":  # the second call's data may simply be a case the function gets wrong
        alone = run(outcome.case.with_(seed=outcome.case.seed + 1))
        if not alone.ok and alone.failures[0][0] != "repeatable":
            outcome, broken = alone, alone.failures[0][0]
    again = [run(outcome.case) for _ in range(REPEATS - 1)]
    failed = 1 + sum(broken in (p for p, _ in o.failures) for o in again)
    notes = [f"found at {found} ({outcome.case})"]
    fresh = [run(outcome.case, fresh=True) for _ in range(2)] if failed == REPEATS and broken != "repeatable" else []
    if fresh and all(not f.failures or f.failures[0][0] != broken for f in fresh):
        outcome.failures.insert(0, ("repeatable", STALE))
        return describe_failure(fn, outcome, diagram, notes, timeout=min(timeout, 10.0), roles=roles)
    if failed < REPEATS:
        notes.append(
            f"intermittent: '{broken}' failed in {failed} of {REPEATS} runs of this case (seed "
            f"{outcome.case.seed}): a race, the result depends on the order the ranks' threads ran in "
            "(a receive from ANY_SOURCE, or a wait on several requests, taken as if in rank order?)"
        )
        return describe_failure(fn, outcome, diagram, notes, timeout=min(timeout, 10.0), roles=roles)
    last = [outcome]

    def fails(case: Case) -> bool:  # the same failure: the property that broke first still breaks
        tried = run(case)
        if tried.failures and tried.failures[0][0] == broken:
            last.append(tried)
            return True
        return False

    shrink(outcome.case, fails, domain)  # its last failing run is last[-1]
    notes[0] += ", then shrunk"
    notes.append(domain.contract().capitalize() + " was judged.")
    return describe_failure(fn, last[-1], diagram, notes, timeout=min(timeout, 10.0), roles=roles)


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
    "pair_cases",
    "dtypes",
    "edge_cases",
    "layouts",
    "ops",
    "rank_data",
    "ranks",
    "run_case",
    "sizes",
] + [f"{name}_property" for name in COLLECTIVES]
