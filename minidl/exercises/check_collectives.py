"""Checkers of exercises 3 to 5: a ring allreduce, a binomial-tree broadcast, recursive doubling for any p.

First a run at p = 3 (so that an unwritten function says "not implemented yet"), then the property-test
kit (``collectives.testing.check``: ranks 1..12, sizes, dtypes, ops, roots and rank layouts drawn by the
kit's own seeded search, a failure shrunk to the smallest case and shown with its messages), then the algorithm's
own cost, counted from the in-process ranks' record of messages: a correct allreduce that is not a ring
is not the exercise's answer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

import collectives
from collectives.testing import PropertyFailure, check
from minidl.exercises.core import Broke, canonical, first_failure

# the kit's drawn examples per tier; tests/test_exercises.py lowers them to stay fast
EXAMPLES = {"check": 60, "submit": 250}
MAX_RANKS = 12
CASE_TIMEOUT = 5.0  # seconds one case may run (a correct ring at p = 12, n = 10^5 takes 0.2 s): a sleep fails fast
DIAGRAM: str | None = None  # where the kit draws a failure's space-time diagram (None: a temporary PNG; "": none)


def _kit(fn: Callable[..., Any], collective: str, tier: str, seed: int) -> None:
    """The kit's properties (result, same bits, inputs untouched, shape and dtype, completes), shrunk."""
    try:
        check(
            fn, collective=collective, max_ranks=MAX_RANKS, examples=EXAMPLES[tier], seed=seed, diagram=DIAGRAM,
            timeout=CASE_TIMEOUT,
        )  # fmt: skip
    except PropertyFailure as e:
        raise Broke(e.property, _describe_case(e.case), str(e)) from None


def _describe_case(case: Any) -> str:
    fields = ("p", "n", "dtype", "op", "root", "layout")
    return ", ".join(f"{f}={getattr(case, f)}" for f in fields if getattr(case, f, None) is not None)


def _record(fn: Callable[..., Any], p: int, n: int, root: int | None) -> Any:
    """Run fn on p in-process ranks with float64 data of n elements (sum): the results and the messages."""

    def rank(comm: Any) -> Any:
        x = np.random.default_rng([n, comm.Get_rank()]).standard_normal(n)
        return fn(comm, x, np.add) if root is None else fn(comm, x, root)

    return collectives.simulate(p, rank, timeout=CASE_TIMEOUT)


def _checked(fn: Callable[..., Any], collective: str, cost: Callable[..., None], tier: str, seed: int) -> None:
    """An unwritten function first, then the kit's properties, then the algorithm's cost on (p, n, root)
    from p = 2, n = 1 up."""
    rooted = collective == "broadcast"
    _smoke(fn, rooted)
    _kit(fn, collective, tier, seed)
    cases = [(p, n, p // 2 if rooted else None) for p in range(2, 10) for n in (1, 2 * p + 1)]
    first_failure(cases, lambda c: cost(fn, c), _describe_cost)


def _smoke(fn: Callable[..., Any], rooted: bool) -> None:
    """One run at p = 3: an unwritten function says so here, and one that does not return in CASE_TIMEOUT
    (a sleep, an endless loop: the kit would wait as long again for each case it shrinks or reruns); any
    other failure is left to the kit to shrink."""
    try:
        _record(fn, 3, 5, 1 if rooted else None)
    except NotImplementedError:
        raise
    except TimeoutError as exc:
        case = "p=3, n=5 float64" + (", root=1" if rooted else "")
        raise Broke("completes", case, f"no return within {CASE_TIMEOUT:g} s: {exc}") from None
    except Exception:  # noqa: BLE001, S110  (the kit reports it, shrunk, with the messages)
        pass


# --------------------------------------------------------------------------- exercise 3: ring allreduce


def _ring_cost(fn: Callable[..., Any], case: tuple) -> None:
    p, n, _ = case
    result = _record(fn, p, n, None)
    block = math.ceil(n / p) * 8
    for m in result.messages:
        if m.dest != (m.source + 1) % p:
            raise Broke("ring: to the right neighbour only", "", f"rank {m.source} sent {m.nbytes} bytes to {m.dest}")
    for r in range(p):
        sent = [m.nbytes for m in result.messages if m.source == r]
        if len(sent) > 2 * (p - 1) or sum(sent) > 2 * (p - 1) * block:
            raise Broke(
                "cost: 2(p-1) messages of n/p elements per rank",
                "",
                f"rank {r} sent {len(sent)} messages, {sum(sent)} bytes; a ring sends at most 2(p-1) = "
                f"{2 * (p - 1)} messages of at most ceil(n/p) = {math.ceil(n / p)} float64s ({block} bytes)",
            )


def check_ring(module: ModuleType, tier: str, seed: int) -> None:
    _checked(module.allreduce, "allreduce", _ring_cost, tier, seed)


def _describe_cost(c: tuple) -> str:
    return f"p={c[0]}, n={c[1]} float64" + ("" if c[2] is None else f", root={c[2]}")


def _hidden_run(seed: int, call: Callable[[Any, np.ndarray, int], np.ndarray]) -> str:
    """A hidden case: ``call(comm, x, root)`` on p ranks with int64 data (sums wrap round exactly in any
    order), every rank's result in the canonical text."""
    rng = np.random.default_rng(seed)
    p, n = int(rng.integers(2, 14)), int(rng.integers(1, 300))
    root = int(rng.integers(0, p))

    def rank(comm: Any) -> np.ndarray:
        x = np.random.default_rng([seed, comm.Get_rank()]).integers(-(2**62), 2**62, n)
        return call(comm, x, root)

    return canonical(*collectives.simulate(p, rank, timeout=CASE_TIMEOUT))


def digest_allreduce(module: ModuleType, seed: int) -> str:
    return _hidden_run(seed, lambda comm, x, root: module.allreduce(comm, x, np.add))


# --------------------------------------------------------------------------- exercise 4: binomial broadcast


def _tree_cost(fn: Callable[..., Any], case: tuple) -> None:
    p, n, root = case
    result = _record(fn, p, n, root)
    for r in range(p):
        got = sum(1 for m in result.messages if m.dest == r)
        if got != (0 if r == root else 1):
            raise Broke(
                "tree: each rank receives once",
                "",
                f"rank {r} received {got} messages (root {root}: none, others: one)",
            )
    rounds = math.ceil(math.log2(p))
    if result.rounds > rounds:
        raise Broke(
            "cost: ceil(log2 p) rounds", "", f"the broadcast took {result.rounds} rounds, a binomial tree {rounds}"
        )


def check_tree(module: ModuleType, tier: str, seed: int) -> None:
    _checked(module.broadcast, "broadcast", _tree_cost, tier, seed)


def digest_tree(module: ModuleType, seed: int) -> str:
    def call(comm: Any, buf: np.ndarray, root: int) -> np.ndarray:
        module.broadcast(comm, buf, root)
        return buf

    return _hidden_run(seed, call)


# --------------------------------------------------------------------------- exercise 5: recursive doubling


def _doubling_cost(fn: Callable[..., Any], case: tuple) -> None:
    p, n, _ = case
    result = _record(fn, p, n, None)
    pof2 = 1 << (p.bit_length() - 1)
    rounds = pof2.bit_length() - 1 + 2 * (p != pof2)
    if result.rounds > rounds:
        raise Broke(
            "cost: log2 p' + 2 (p != p') rounds",
            "",
            f"the allreduce took {result.rounds} rounds; recursive doubling with the fold takes {rounds} "
            f"(p' = {pof2}, the largest power of two <= p)",
        )


def check_doubling(module: ModuleType, tier: str, seed: int) -> None:
    _checked(module.allreduce, "allreduce", _doubling_cost, tier, seed)
