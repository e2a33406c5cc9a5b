"""Run one case of a user's collective on in-process ranks and check every property; say which broke.

completes         it returns on every rank under synchronous sends (a send waits for its receive,
                  as MPI_Ssend, and as any MPI for long messages); no exception, no deadlock, no hang
shape-dtype       each rank's result is a flat array of the answer's length and the input's dtype
inputs-untouched  the caller's arrays hold the same bits afterwards, and no result is a view of them
result            the right answer on every rank (exact, or within the float bound of spec.py)
same-bits         where the collective promises it (allreduce, allgather, broadcast), every rank
                  of a group holds the same bits: what keeps data-parallel replicas identical
cost              (optional) the messages and bytes each rank sends, from the record of the run,
                  against a declared cost such as the ring's 2(p - 1) messages and 2(p - 1)/p n bytes
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectives import cost as cost_model
from collectives.common import OPS
from collectives.inprocess import DeadlockError, Message, recorded, simulate, traffic
from collectives.kit.cases import Case, groups, np_dtype, split_args
from collectives.kit.spec import COLLECTIVES, Arrays, Expected, make_arrays, wrong

PROPERTIES = ("completes", "shape-dtype", "inputs-untouched", "result", "same-bits", "repeatable", "cost")


@dataclass(frozen=True)
class Cost:
    """A declared cost per rank: ``messages(p)`` sends and ``bytes(p, nbytes)`` bytes (an int or float for
    every rank alike, or a list by rank), nbytes being one rank's input. A rank's bytes may differ from
    the declared ones by one element per message (blocks of n/p round up or down); counts are exact.

        Cost(messages=lambda p: 2 * (p - 1), bytes=lambda p, nbytes: 2 * (p - 1) / p * nbytes)   # the ring
        Cost.of("ring")   # the package's own model (collectives/cost.py): exact counts and total bytes
    """

    messages: Callable[[int], int | Sequence[int]] | None = None
    bytes: Callable[[int, int], float | Sequence[float]] | None = None
    total_bytes: Callable[[int, int], int] | None = None

    @staticmethod
    def of(algorithm: str) -> Cost:
        """The allreduce cost model of one of collectives.ALGORITHMS."""
        return Cost(
            messages=lambda p: cost_model.messages_per_rank(algorithm, p),
            total_bytes=lambda p, nbytes: cost_model.total_bytes(algorithm, p, nbytes),
        )


@dataclass
class Outcome:
    """What one case did: each world rank's inputs (as they were), result and answer, and the messages."""

    case: Case
    failures: list[tuple[str, str]] = field(default_factory=list)  # (property, what broke)
    inputs: list[Arrays] = field(default_factory=list)
    results: list[Any] = field(default_factory=list)
    expected: list[Expected | None] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    first_wrong: tuple[int, int] | None = None  # (world rank, element)
    checked: list[str] = field(default_factory=lambda: ["completes"])  # the properties checked
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return not self.failures


def run_case(
    fn: Callable[..., Any], case: Case, *, timeout: float = 20.0, cost: Cost | None = None, record_data: bool = False
) -> Outcome:
    """Run ``fn`` on ``case`` (its p ranks split by its layout) and check every property.

    fn is called twice on the same communicator: on the case's data, then on other data (the next
    seed), so that state kept from one call to the next (a cached buffer, a drifting tag) shows.
    ``record_data``: keep every message's bytes (``Message.data``), as the report's step table reads them.
    """
    spec = COLLECTIVES[case.collective]
    if case.inplace and not spec.inplace:
        raise ValueError(f"{case.collective} has no in-place form")
    members, again = groups(case.p, case.layout), case.with_(seed=case.seed + 1)
    arrays, arrays2 = _arrays(case, members), _arrays(again, members)
    out = Outcome(case, inputs=[{k: _copy(v) for k, v in a.items()} for a in arrays])
    out.expected, expected2 = _expected(case, members, out.inputs), _expected(again, members, arrays2)
    f = OPS[case.op] if case.op else None
    first_call: list[int] = []  # how many messages the first call sent

    def rank_main(comm: Any) -> tuple[Any, Any, Any]:
        w = comm.Get_rank()
        sub = comm if case.layout == "world" else comm.Split(*split_args(case.p, case.layout, w))
        q, r = sub.Get_size(), sub.Get_rank()
        first = spec.call(fn, sub, arrays[w], case, q, r, f)
        kept = _copy(first)
        comm.Barrier()  # every rank is done with the first call ...
        if w == 0:
            first_call.append(recorded(comm))
        comm.Barrier()  # ... and no rank starts the second before its messages are counted
        second = spec.call(fn, sub, {k: _copy(v) for k, v in arrays2[w].items()}, again, q, r, f)
        return first, kept, second

    start = time.perf_counter()
    try:
        res = simulate(case.p, rank_main, timeout=timeout, record_data=record_data)
    except (DeadlockError, TimeoutError) as exc:
        out.failures.append(("completes", _stuck(exc)))
        out.messages = getattr(exc, "messages", [])  # what was sent before it stuck
    except Exception as exc:  # noqa: BLE001  (the user's code may raise anything; it is the finding)
        out.failures.append(("completes", _raised(exc)))
    else:
        out.results, out.messages = [kept for _, kept, _ in res], res.messages[: first_call[0]]
        _check(out, arrays, members, cost, live=[first for first, _, _ in res])
        _repeatable(out, [(first, second) for first, _, second in res], expected2)
        out.checked += list(PROPERTIES[1:4])  # shape-dtype, inputs-untouched, result
        out.checked += ["same-bits"] * spec.same_bits + ["repeatable"]
        out.checked += ["cost"] * (cost is not None and case.layout == "world")
    out.seconds = time.perf_counter() - start
    return out


def _arrays(case: Case, members: list[list[int]]) -> list[Arrays]:
    """Every world rank's arrays for the case (each group's made for its size)."""
    arrays: list[Arrays] = [{} for _ in range(case.p)]
    for group in members:
        for w, a in zip(group, make_arrays(case, group)):
            arrays[w] = a
    return arrays


def _expected(case: Case, members: list[list[int]], inputs: list[Arrays]) -> list[Expected | None]:
    spec = COLLECTIVES[case.collective]
    expected: list[Expected | None] = [None] * case.p
    for group in members:
        for r, w in enumerate(group):
            expected[w] = spec.expect(case, [inputs[v] for v in group], r)
    return expected


def _repeatable(out: Outcome, calls: list[tuple[Any, Any]], expected2: list[Expected | None]) -> None:
    """The first call's results keep their bits through a second call, which is right too."""
    for w, ((first, second), kept) in enumerate(zip(calls, out.results)):
        if isinstance(kept, np.ndarray) and isinstance(first, np.ndarray) and kept.tobytes() != first.tobytes():
            out.failures.append(
                (
                    "repeatable",
                    f"rank {w}'s first result changed when fn was called again (a buffer kept between calls?)",
                )
            )
            return
        want = expected2[w]
        if want is not None and (_shape_problem(second, want.value) or wrong(second, want, out.case.op).any()):
            out.failures.append(
                (
                    "repeatable",
                    f"a second call on the same communicator (seed {out.case.seed + 1}) is wrong on rank {w}",
                )
            )
            return


def _copy(v: Any) -> Any:
    return v.copy() if isinstance(v, np.ndarray) else v


def _stuck(exc: BaseException) -> str:
    kind = "deadlock under synchronous sends" if isinstance(exc, DeadlockError) else "did not finish in time"
    return f"{kind}; what each rank waits on:\n{exc}"


def _raised(exc: BaseException) -> str:
    """The exception and the line of the user's code (the last frame outside the kit and the simulator)."""
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if "/collectives/kit/" not in fr.filename]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames else ""
    notes = " ".join(getattr(exc, "__notes__", []))
    return f"{type(exc).__name__}: {exc} {notes}{where}".strip()


def _check(
    out: Outcome, arrays: list[Arrays], members: list[list[int]], cost: Cost | None, live: list[Any] | None = None
) -> None:
    """The properties after a run that completed, in the order PROPERTIES lists them.

    ``out.results`` are copies taken as the first call returned; ``live`` the very objects it returned
    (default: the results themselves), which must not be views of the caller's arrays.
    """
    live = out.results if live is None else live
    case, spec = out.case, COLLECTIVES[out.case.collective]
    shape_errors, touched, wrong_ranks = [], [], []
    for group in members:
        for r, w in enumerate(group):
            got, want = out.results[w], out.expected[w]
            written = spec.outputs(case, r)
            for name, before in out.inputs[w].items():
                after = arrays[w][name]
                if name not in written and isinstance(before, np.ndarray) and before.tobytes() != after.tobytes():
                    touched.append(f"rank {w}'s {name} was modified")
                if name not in written and _aliases(live[w], after):
                    touched.append(f"rank {w}'s result is a view of its {name} (writing one changes the other)")
            if want is None:
                continue
            problem = _shape_problem(got, want.value)
            if problem:
                shape_errors.append(f"rank {w}: {problem}")
                continue
            bad = wrong(got, want, case.op)
            if bad.any():
                wrong_ranks.append((w, bad))
    if shape_errors:
        out.failures.append(("shape-dtype", "; ".join(shape_errors[:4])))
    if touched:
        out.failures.append(("inputs-untouched", "; ".join(touched[:4])))
    if wrong_ranks:
        w, bad = wrong_ranks[0]
        i = int(np.argmax(bad))
        out.first_wrong = (w, i)
        listed = ", ".join(f"{v} ({int(b.sum())} of {b.size})" for v, b in wrong_ranks[:8])
        out.failures.append(("result", f"wrong elements on ranks {listed}; first: rank {w}, element {i}"))
    if spec.same_bits and not shape_errors:
        _same_bits(out, members)
    if cost is not None and case.layout == "world":
        _cost(out, cost)


def _shape_problem(got: Any, want: np.ndarray) -> str:
    if not isinstance(got, np.ndarray):
        return f"returned {type(got).__name__}, not a NumPy array"
    if got.shape != want.shape:
        return f"shape {got.shape}, expected {want.shape}"
    if got.dtype != want.dtype:
        return f"dtype {got.dtype}, expected {want.dtype}"
    return ""


def _aliases(result: Any, array: Any) -> bool:
    return isinstance(result, np.ndarray) and isinstance(array, np.ndarray) and np.shares_memory(result, array)


def _same_bits(out: Outcome, members: list[list[int]]) -> None:
    for group in members:
        bits = {w: out.results[w].tobytes() for w in group}
        first = group[0]
        differ = [w for w in group if bits[w] != bits[first]]
        if differ:
            w = differ[0]
            diff = np.flatnonzero(out.results[w].view(np.uint8) != out.results[first].view(np.uint8))
            i = int(diff[0]) // max(out.results[w].itemsize, 1)
            out.failures.append(
                (
                    "same-bits",
                    f"ranks {first} and {w} hold different bits (element {i}: {out.results[first][i]} against "
                    f"{out.results[w][i]}); {len(differ)} of {len(group)} ranks differ from rank {first}: "
                    "each rank must combine the same operands in the same order",
                )
            )
            return


def _cost(out: Outcome, cost: Cost) -> None:
    p, itemsize = out.case.p, np_dtype(out.case.dtype).itemsize
    nbytes = out.case.n * itemsize
    count, sent = traffic(out.messages, p)
    problems = []
    if cost.messages is not None:
        declared = _per_rank(cost.messages(p), p)
        problems += [
            f"rank {r} sent {count[r]} messages, declared {declared[r]}" for r in range(p) if count[r] != declared[r]
        ]
    if cost.bytes is not None:
        declared_b = _per_rank(cost.bytes(p, nbytes), p)
        problems += [
            f"rank {r} sent {sent[r]} bytes, declared {declared_b[r]:g} (+- {count[r] * itemsize})"
            for r in range(p)
            if abs(sent[r] - declared_b[r]) > count[r] * itemsize
        ]
    if cost.total_bytes is not None and sum(sent) != cost.total_bytes(p, nbytes):
        problems.append(f"the ranks sent {sum(sent)} bytes in all, declared {cost.total_bytes(p, nbytes)}")
    if problems:
        out.failures.append(("cost", "; ".join(problems[:4])))


def _per_rank(value: Any, p: int) -> list:
    return list(value) if isinstance(value, (list, tuple, np.ndarray)) else [value] * p
