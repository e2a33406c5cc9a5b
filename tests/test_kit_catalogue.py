"""The property-test kit proves itself (issue 22): it catches every bug of tests/kit_bugs, names the
property that broke, shrinks the case to a small one, and passes every correct page of the package.

A bug the kit does not catch is a bug in the kit: such entries of the catalogue carry ``uncaught``
(tests/kit_bugs/UNCAUGHT.md says why) and run here as strict xfails, so that the day the kit catches
them this file says so (the race, caught on most runs, as a non-strict xfail on hypothesis' Flaky).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis.errors import Flaky
from kit_bugs import CATALOGUE, Bug, ring_bugs

from collectives import exchange, naive, prefix, rabenseifner, recursive_doubling, ring, tree
from collectives.testing import DTYPES, PROPERTIES, PropertyFailure, check

BUG_EXAMPLES = 100  # the kit's default: most bugs fall on its first (edge) cases, the rest within a few dozen
PAGE_EXAMPLES = 10  # per correct page: each check also runs the 5 edge cases (p = 1..3, n = 0..3) first


def _uncaught(bug: Bug) -> pytest.MarkDecorator:
    """A known gap: strict (the day the kit catches it, this fails), or for a race, hypothesis' Flaky expected
    on the runs where the kit does not turn it into a PropertyFailure."""
    if bug.flaky:
        return pytest.mark.xfail(strict=False, raises=Flaky, reason=bug.uncaught)
    return pytest.mark.xfail(strict=True, reason=bug.uncaught)


def _caught(bug: Bug, seed: int = 0) -> PropertyFailure:
    with pytest.raises(PropertyFailure) as info:
        check(bug.fn, bug.collective, seed=seed, examples=BUG_EXAMPLES, diagram="", **bug.kwargs)
    return info.value


@pytest.mark.parametrize(
    "bug",
    [pytest.param(bug, marks=_uncaught(bug) if bug.uncaught else ()) for bug in CATALOGUE],
    ids=lambda bug: bug.name,
)
def test_kit_catches_bug(bug: Bug) -> None:
    failure = _caught(bug)
    report = str(failure)
    assert failure.property in (bug.prop, *bug.also), f"{bug.name}: expected {bug.prop!r}, the kit reported:\n{report}"
    assert bug.small(failure.case), f"{bug.name}: shrunk to {failure.case}, expected {bug.bound}\n{report}"
    assert failure.property in report and f"p={failure.case.p}" in report and f"n={failure.case.n}" in report


def test_catalogue_is_whole() -> None:
    """Every property but none is found by some bug, and every bug names a property the kit has."""
    assert {bug.prop for bug in CATALOGUE} == set(PROPERTIES)
    assert len({bug.name for bug in CATALOGUE}) == len(CATALOGUE)


def test_deadlock_report_names_what_each_rank_waits_on() -> None:
    """Send-then-Recv round the ring: the report shows both ranks blocked in their Send, and no hang."""
    bug = next(b for b in CATALOGUE if b.fn is ring_bugs.send_then_recv)
    failure = _caught(bug)
    report, p = str(failure), failure.case.p
    assert "deadlock" in report and p == 2
    for rank in range(p):
        assert f"rank {rank} (step 0): blocked in Send(dest={(rank + 1) % p}" in report, report


def test_report_shows_expected_against_got() -> None:
    """The p = 1 bug: the report holds the input, the answer and what came back, and the first wrong element."""
    bug = next(b for b in CATALOGUE if b.name == "broken_at_one_rank")
    failure = _caught(bug)
    report = str(failure)
    assert failure.case.p == 1
    assert "expected" in report and "got" in report and "rank 0" in report


# -- every correct page passes ---------------------------------------------------------------------------
_SCATTER_DTYPES = [np.dtype(d) for d in DTYPES if not d.startswith("pair:")]


def scatterv_page(comm: Any, x: np.ndarray | None, b: list[int], root: int) -> np.ndarray:
    """naive.scatterv with the kit's signature. Off the root the kit gives no x, so those ranks learn
    the dtype first: the root broadcasts its index among the kit's dtypes down the binomial tree."""
    rank, code = comm.Get_rank(), np.zeros(1, np.int64)
    if rank == root:
        code[0] = _SCATTER_DTYPES.index(x.dtype)
    tree.broadcast_into(comm, code, root)
    out = np.empty(b[rank + 1] - b[rank], _SCATTER_DTYPES[int(code[0])])
    naive.scatterv(comm, x, out, b, root)
    return out


def bruck_alltoall(comm: Any, x: np.ndarray) -> np.ndarray:
    """exchange.bruck with the kit's alltoall signature (it takes the block length m)."""
    return exchange.bruck(comm, x, x.size // comm.Get_size())


def exscan_page(comm: Any, x: np.ndarray, f: Any) -> np.ndarray | None:
    """prefix.scan's exclusive form."""
    return prefix.scan(comm, x, f, inclusive=False)


PAGES = [
    (ring.allreduce, "allreduce", {}),
    (ring.allreduce, "allreduce", {"cost": "ring"}),
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
    (scatterv_page, "scatterv", {}),
]


@pytest.mark.parametrize(
    ("fn", "collective", "kwargs"),
    PAGES,
    ids=[f"{c}-{fn.__module__.rsplit('.', 1)[-1]}.{fn.__name__}{'-' + ','.join(k) if k else ''}" for fn, c, k in PAGES],
)  # fmt: skip
def test_correct_page_passes(fn: Any, collective: str, kwargs: dict) -> None:
    report = check(fn, collective, seed=0, examples=PAGE_EXAMPLES, diagram="", **kwargs)
    assert report.examples >= PAGE_EXAMPLES
