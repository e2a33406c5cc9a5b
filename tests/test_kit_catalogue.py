"""The property-test kit proves itself (issue 22): it catches every bug of tests/kit_bugs, names the
property that broke, shrinks the case to a small one, and passes every correct page of the package.

A bug the kit does not catch is a bug in the kit: such entries of the catalogue carry ``uncaught``
(tests/kit_bugs/UNCAUGHT.md says why) and run here as strict xfails, so that the day the kit catches
them this file says so.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from kit_bugs import CATALOGUE, Bug, ring_bugs

from collectives import exchange, naive, prefix, rabenseifner, recursive_doubling, ring, tree
from collectives.kit.search import Domain, shrink
from collectives.testing import PROPERTIES, Case, PropertyFailure, check

BUG_EXAMPLES = 100  # the kit's default: most bugs fall on its first (edge) cases, the rest within a few dozen
PAGE_EXAMPLES = 5  # per correct page, after the kit's 5 edge cases (p = 1..3, n = 0..3): 10 cases, each run twice


def _caught(bug: Bug, seed: int = 0) -> PropertyFailure:
    with pytest.raises(PropertyFailure) as info:
        check(bug.fn, bug.collective, seed=seed, examples=BUG_EXAMPLES, diagram="", **bug.kwargs)
    return info.value


@pytest.mark.parametrize(
    "bug",
    [
        pytest.param(bug, marks=pytest.mark.xfail(strict=True, reason=bug.uncaught) if bug.uncaught else ())
        for bug in CATALOGUE
    ],
    ids=lambda bug: bug.name,
)
def test_kit_catches_bug(bug: Bug) -> None:
    failure = _caught(bug)
    report = str(failure)
    assert failure.property in (bug.prop, *bug.also), f"{bug.name}: expected {bug.prop!r}, the kit reported:\n{report}"
    assert bug.small(failure.case), f"{bug.name}: shrunk to {failure.case}, expected {bug.bound}\n{report}"
    assert failure.property in report and f"p={failure.case.p}" in report and f"n={failure.case.n}" in report
    if failure.property == "result":  # each rank's answer against what came back
        assert "expected" in report and "got" in report
    if "deadlock" in report:  # what each rank waits on; for Send-then-Recv, both ranks in their Send
        assert all(f"rank {r} (step" in report for r in range(failure.case.p)), report
    if bug.fn is ring_bugs.send_then_recv:
        assert all(f"rank {r} (step 0): blocked in Send(dest={1 - r}" in report for r in range(2)), report


def test_catalogue_is_whole() -> None:
    """Some bug of the catalogue breaks each of the kit's properties, every bug it catches names one of them,
    and no two bugs share a name."""
    assert set(PROPERTIES) <= {bug.prop for bug in CATALOGUE}
    assert {prop for bug in CATALOGUE if not bug.uncaught for prop in (bug.prop, *bug.also)} <= set(PROPERTIES)
    assert len({bug.name for bug in CATALOGUE}) == len(CATALOGUE)


def test_shrinking_a_case_that_fails_for_every_dtype_stops() -> None:
    """A bug that fails for p >= 3 whatever the dtype (a hang, say): shrinking from the edge case (3, 2)
    reaches p = 3, n = 0 in a few re-runs, not the search's limit of 200 (each re-run of a hang costs the
    whole timeout: 20 s by default)."""
    tries: list[Case] = []

    def fails(case: Case) -> bool:
        tries.append(case)
        return case.p >= 3

    small = shrink(Case("allreduce", 3, 2), fails, Domain.of("allreduce"))
    assert (small.p, small.n) == (3, 0)
    assert len(tries) <= 40, f"{len(tries)} re-runs, dtypes tried in turn: {[c.dtype for c in tries[-6:]]}"


def test_shrinking_keeps_a_root_that_fails() -> None:
    """A bug for every root but 0 (root_bugs.reduce_root_zero_only), found at p = 7, root = 6, shrinks to
    p = 2, root = 1; the search's seed 1 draws that case (reported at p = 7)."""
    small = shrink(Case("reduce", 7, 1, root=6), lambda case: case.root != 0, Domain.of("reduce"))
    assert (small.p, small.root) == (2, 1), small


# -- every correct page passes ---------------------------------------------------------------------------
def bruck_alltoall(comm: Any, x: np.ndarray) -> np.ndarray:
    """exchange.bruck with the kit's alltoall signature (it takes the block length m)."""
    return exchange.bruck(comm, x, x.size // comm.Get_size())


def exscan_page(comm: Any, x: np.ndarray, f: Any) -> np.ndarray | None:
    """prefix.scan's exclusive form."""
    return prefix.scan(comm, x, f, inclusive=False)


PAGES = [
    (ring.allreduce, "allreduce", {"cost": "ring"}),  # every property, and the ring's cost
    (tree.allreduce, "allreduce", {}),
    (recursive_doubling.allreduce, "allreduce", {}),
    (rabenseifner.allreduce, "allreduce", {}),
    (naive.allreduce, "allreduce", {}),
    (tree.reduce, "reduce", {}),
    (tree.broadcast_into, "broadcast", {}),
    (ring.reduce_scatter, "reduce_scatter", {}),
    (ring.reduce_scatter, "reduce_scatterv", {}),
    (rabenseifner.reduce_scatter, "reduce_scatter", {}),
    (ring.allgather_into, "allgather", {"inplace": True}),
    (naive.gatherv, "gatherv", {}),
    (exchange.pairwise, "alltoallv", {}),
    (bruck_alltoall, "alltoall", {}),
    (prefix.scan, "scan", {}),
    (exscan_page, "exscan", {}),
    (naive.scatterv, "scatterv", {}),
]


@pytest.mark.parametrize(
    ("fn", "collective", "kwargs"),
    PAGES,
    ids=[f"{c}-{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}{'-' + ','.join(k) if k else ''}" for fn, c, k in PAGES],
)  # fmt: skip
def test_correct_page_passes(fn: Any, collective: str, kwargs: dict) -> None:
    report = check(fn, collective, seed=0, examples=PAGE_EXAMPLES, diagram="", **kwargs)
    assert report.examples >= PAGE_EXAMPLES
