"""Run one case of a user's collective on in-process ranks and check every property; say which broke.

completes              it returns on every rank under synchronous sends (a send waits for its receive,
                       as MPI_Ssend, and as any MPI for long messages); no exception, no deadlock, no hang,
                       no sys.exit or os._exit
truncation             no message is longer than the receive that takes it (MPI_ERR_TRUNCATE)
no-aliasing            no rank sends from and receives into the same bytes while both are pending
request-completed      every request a rank posted is completed (Wait, Test, Waitall) before its call returns
send-buffer-untouched  a nonblocking send's buffer holds its bytes until its request completes
shape-dtype            each rank's result is a flat array of the answer's length and the input's dtype
inputs-untouched       the caller's arrays hold the same bits afterwards, and no result is a view of them
result                 the right answer on every rank (exact, or within the float bound of spec.py); None
                       off the root of a reduce or gather
same-bits              where the collective promises it (allreduce, allgather, broadcast), every rank
                       of a group holds the same bits: what keeps data-parallel replicas identical
repeatable             a second call on the same communicator is right too, and leaves the first
                       call's result alone (no state kept between calls)
cost                   (optional) the messages and bytes each rank sends, from the record of the run,
                       against a declared cost such as the ring's 2(p - 1) messages and 2(p - 1)/p n bytes

The four after ``completes`` are the errors MPI itself catches or suffers (collectives/inprocess.py
records them as they happen, with the user's line). Each rank runs its own copy of the user's
module (namespace.py), as each MPI process has its own.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from collectives import cost as cost_model
from collectives.common import OPS
from collectives.inprocess import (
    DeadlockError,
    Message,
    NotOffered,
    TruncationError,
    caller,
    kit_frame,
    open_requests,
    recorded,
    simulate,
    traffic,
    written_after_post,
)
from collectives.kit import roles as signature_roles
from collectives.kit.cases import Case, groups, np_dtype, split_args
from collectives.kit.namespace import ModuleCopies
from collectives.kit.spec import COLLECTIVES, Arrays, Expected, make_arrays, wrong

PROPERTIES = (
    "completes", "truncation", "no-aliasing", "request-completed", "send-buffer-untouched", "shape-dtype",
    "inputs-untouched", "result", "same-bits", "repeatable", "cost",
)  # fmt: skip
MPI_ERRORS = PROPERTIES[1:5]  # what MPI itself catches or suffers
NO_RESULT_OFF_ROOT = ("reduce", "gather", "gatherv")  # MPI: the result exists on the root only


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
    notes: list[str] = field(default_factory=list)  # what the report should say besides the failures

    @property
    def ok(self) -> bool:
        return not self.failures


def run_case(
    fn: Callable[..., Any],
    case: Case,
    *,
    timeout: float = 20.0,
    cost: Cost | None = None,
    record_data: bool = False,
    signature: str | Sequence[str] | None = None,
    copies: ModuleCopies | None = None,
) -> Outcome:
    """Run ``fn`` on ``case`` (its p ranks split by its layout) and check every property.

    fn is called twice on the same communicator: on the case's data, then on other data (the next
    seed), so that state kept from one call to the next (a cached buffer, a drifting tag) shows.
    ``record_data``: keep every message's bytes (``Message.data``), as the report's step table reads them.
    ``signature``: the user's parameters by role (roles.py), default the kit's own; ``copies``: each
    rank's copy of fn's module, kept across cases (default: fresh ones for this case).
    Raises NotOffered when fn calls an mpi4py name the in-process ranks lack (a usage error, not a verdict).
    """
    spec = COLLECTIVES[case.collective]
    if case.inplace and not spec.inplace:
        raise ValueError(f"{case.collective} has no in-place form")
    roles = signature_roles.parse(signature, case.collective, case.inplace) if signature is not None else None
    copies = copies or ModuleCopies(fn)
    members, again = groups(case.p, case.layout), case.with_(seed=case.seed + 1)
    arrays, arrays2 = _arrays(case, members), _arrays(again, members)
    out = Outcome(case, inputs=[{k: _copy(v) for k, v in a.items()} for a in arrays])
    out.expected, expected2 = _expected(case, members, out.inputs), _expected(again, members, arrays2)
    f = OPS[case.op] if case.op else None
    first_call: list[int] = []  # how many messages the first call sent
    left_open: list[str] = []  # requests a rank had not completed when its call returned

    def rank_main(comm: Any) -> tuple[Any, Any, Any]:
        w = comm.Get_rank()
        user, namespace = copies.function(w, comm)
        sub = comm if case.layout == "world" else comm.Split(*split_args(case.p, case.layout, w))
        q, r = sub.Get_size(), sub.Get_rank()

        def call(c: Case, a: Arrays) -> Any:
            mpi_op = getattr(namespace, c.op.upper(), None) if c.op else None
            user_fn = signature_roles.adapt(user, roles, c, q, r, mpi_op) if roles else user
            result = spec.call(user_fn, sub, a, c, q, r, f)
            pending = open_requests(comm)
            if pending:
                written_after_post(comm, pending)
                listed = "; ".join(f"{p.call}(peer {p.peer}, tag {p.tag}) from {p.where}" for p in pending[:3])
                left_open.append(f"rank {w} returned with {len(pending)} request(s) never completed: {listed}")
                for p in pending:
                    p.Free()
            return result

        first = call(case, arrays[w])
        kept = _copy(first)
        comm.Barrier()  # every rank is done with the first call ...
        if w == 0:
            first_call.append(recorded(comm))
        comm.Barrier()  # ... and no rank starts the second before its messages are counted
        second = call(again, {k: _copy(v) for k, v in arrays2[w].items()})
        return first, kept, second

    start = time.perf_counter()
    violated: list[Any] = []
    try:
        with _exits_raise():
            res = simulate(case.p, rank_main, timeout=timeout, record_data=record_data)
    except NotOffered:
        raise
    except BaseException as exc:  # noqa: BLE001  (the user's code may raise anything, exit included: a finding)
        prop = "truncation" if isinstance(exc, TruncationError) else "completes"
        stuck = isinstance(exc, (DeadlockError, TimeoutError))
        out.failures.append((prop, _stuck(exc) if stuck else _raised(exc)))
        out.messages = getattr(exc, "messages", [])  # what was sent before it stopped
        violated = getattr(exc, "violations", [])
    else:
        out.results, out.messages = [kept for _, kept, _ in res], res.messages[: first_call[0]]
        _check(out, arrays, members, cost, live=[first for first, _, _ in res], roles=roles)
        _repeatable(out, [(first, second) for first, _, second in res], expected2)
        out.checked += list(PROPERTIES[5:8])  # shape-dtype, inputs-untouched, result
        judged = not any(prop in ("shape-dtype", "result") for prop, _ in out.failures)  # see _repeatable
        out.checked += ["same-bits"] * spec.same_bits + ["repeatable"] * judged
        out.checked += ["cost"] * (cost is not None and case.layout == "world")
        violated = res.violations
    _mpi_errors(out, violated, left_open)
    out.seconds = time.perf_counter() - start
    if copies.shared_note:
        out.notes.append(copies.shared_note)
    return out


class ExitCalled(Exception):
    """The user's code called os._exit: in process that would end the checker, so it raises this instead."""


@contextlib.contextmanager
def _exits_raise() -> Any:
    """os._exit raises ExitCalled while a case runs (sys.exit raises SystemExit anyway)."""
    real = os._exit

    def _exit(code: int = 0) -> None:
        if threading.current_thread() is threading.main_thread():
            real(code)
        raise ExitCalled(f"the function called os._exit({code}) at {caller()}")

    os._exit = _exit  # type: ignore[assignment]
    try:
        yield
    finally:
        os._exit = real


def _mpi_errors(out: Outcome, violated: list[Any], left_open: list[str]) -> None:
    """The MPI-error properties first in the failures, in PROPERTIES' order, each said once."""
    found: dict[str, str] = {}
    for v in violated:
        found.setdefault(v.property, str(v))
    if left_open:
        found.setdefault("request-completed", left_open[0])
    out.failures += [(prop, found[prop]) for prop in MPI_ERRORS if prop in found]
    out.failures.sort(key=lambda failure: _order(failure[0]))
    out.checked[1:1] = [p for p in MPI_ERRORS if p not in out.checked]


def _order(prop: str) -> int:
    """A failure's place in the report: PROPERTIES' order (what broke first explains what follows)."""
    return PROPERTIES.index(prop) if prop in PROPERTIES else len(PROPERTIES)


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
    """The first call's results keep their bits through a second call, which is right too (judged only when
    the first call was right: a function wrong on any data is 'result', not state kept between calls)."""
    if any(prop in ("shape-dtype", "result") for prop, _ in out.failures):
        return
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
    kind = (
        "deadlock under synchronous sends (a schedule that needs MPI to buffer its sends, or a receive from a rank "
        "that never sends it)"
        if isinstance(exc, DeadlockError)
        else "did not finish in time"
    )
    return f"{kind}; what each rank waits on:\n{exc}"


def _raised(exc: BaseException) -> str:
    """The exception and the user's line: the innermost frame outside the kit and the in-process ranks."""
    frames = [fr for fr in traceback.extract_tb(exc.__traceback__) if _user_frame(fr.filename)]
    where = f" at {frames[-1].filename}:{frames[-1].lineno}: {frames[-1].line}" if frames else ""
    notes = " ".join(n for n in getattr(exc, "__notes__", []) if "simulated rank" not in n)
    message = " ".join(line.strip() for line in str(exc).splitlines()[-1:] if line.strip())  # MPI's last line says it
    if "\n" in str(exc):
        exc_text = str(exc).splitlines()[0].removesuffix(", error stack:") + ": " + message
    else:
        exc_text = str(exc)
    if isinstance(exc, SystemExit):
        return f"the function called sys.exit({exc.code!r}){where}"
    if isinstance(exc, KeyboardInterrupt):
        return f"KeyboardInterrupt raised inside the function{where}"
    if isinstance(exc, ExitCalled):
        return str(exc)
    return f"{type(exc).__name__}: {exc_text} {notes}{where}".strip()


def _user_frame(filename: str) -> bool:
    """A frame of the user's code: not the kit's, not a library's (NumPy, mpi4py, the standard library)."""
    name = os.path.abspath(filename)
    if kit_frame(name) or not name.endswith(".py") or "-packages" + os.sep in name:
        return False
    return not name.startswith(os.path.join(sys.base_prefix, "lib"))


def _check(
    out: Outcome,
    arrays: list[Arrays],
    members: list[list[int]],
    cost: Cost | None,
    live: list[Any] | None = None,
    roles: tuple[str, ...] | None = None,
) -> None:
    """The properties after a run that completed, in the order PROPERTIES lists them.

    ``out.results`` are copies taken as the first call returned; ``live`` the very objects it returned
    (default: the results themselves), which must not be views of the caller's arrays.
    """
    live = out.results if live is None else live
    case, spec = out.case, COLLECTIVES[out.case.collective]
    shape_errors: list[str] = []
    touched: list[str] = []
    wrong_ranks: list[tuple[int, Any]] = []
    for group in members:
        for r, w in enumerate(group):
            got, want = out.results[w], out.expected[w]
            written = spec.outputs(case, r)
            for name, before in out.inputs[w].items():
                after = arrays[w][name]
                shown = getattr(roles, "words", {}).get(name, name)  # the user's word for it
                if name not in written and isinstance(before, np.ndarray) and before.tobytes() != after.tobytes():
                    touched.append(f"rank {w}'s {shown} was modified (the caller's input: work on a copy)")
                if name not in written and _aliases(live[w], after):
                    touched.append(f"rank {w}'s result is a view of its {shown} (writing one changes the other)")
            if want is None:
                if got is not None and case.collective in NO_RESULT_OFF_ROOT:
                    wrong_ranks.append((w, None))
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
    off_root = [w for w, bad in wrong_ranks if bad is None]
    wrong_ranks = [(w, bad) for w, bad in wrong_ranks if bad is not None]
    if wrong_ranks:
        w, bad = wrong_ranks[0]
        i = int(np.argmax(bad))
        out.first_wrong = (w, i)
        listed = ", ".join(f"{v} ({int(b.sum())} of {b.size})" for v, b in wrong_ranks[:8])
        out.failures.append(("result", f"wrong elements on ranks {listed}; first: rank {w}, element {i}"))
    elif off_root:
        out.failures.append(
            (
                "result",
                f"rank {off_root[0]} is not the root but gave a result (partial results?): off the root, "
                f"{case.collective} returns None"
                + (" and leaves recv alone (it is significant at the root only)" if roles and "recv" in roles else ""),
            )
        )
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
    """Every rank of a group holds the same bits; for max and min, the same values (+0.0 and -0.0 are
    one value, and which one max(+0.0, -0.0) gives is IEEE's choice, not an order's)."""
    by_value = out.case.op in ("max", "min") and out.results[members[0][0]].dtype.kind in "fc"
    if out.case.op is None:
        advice = "every rank must end with the very bits sent (read a buffer only after its receive completed)"
    else:
        advice = "each rank must combine the same operands in the same order"
    for group in members:
        first = group[0]
        if by_value:
            a = out.results[first]
            differ = [w for w in group if not ((out.results[w] == a) | (np.isnan(out.results[w]) & np.isnan(a))).all()]
        else:
            bits = {w: out.results[w].tobytes() for w in group}
            differ = [w for w in group if bits[w] != bits[first]]
        if differ:
            w = differ[0]
            diff = np.flatnonzero(out.results[w].view(np.uint8) != out.results[first].view(np.uint8))
            i = int(diff[0]) // max(out.results[w].itemsize, 1)
            out.failures.append(
                (
                    "same-bits",
                    f"ranks {first} and {w} hold different bits (element {i}: {out.results[first][i]} against "
                    f"{out.results[w][i]}); {len(differ)} of {len(group)} ranks differ from rank {first}: " + advice,
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
