"""The report of a shrunk failure: what broke, on which case, with what inputs, and the messages that did it.

The step table comes from a second run of the same function on the failing p and n with traceable
values (cases.rank_data's "traceable": element i of rank r is 2^r + 2^24 i, and int64 sums keep
both), so every message can be read as "which ranks' contributions, which elements". The run on
the failing dtype is what the space-time diagram draws, with the first wrong rank in red.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from collectives.kit.cases import TRACE_BITS, Case
from collectives.kit.run import Outcome, run_case
from collectives.kit.spec import counts, matrix

TABLE_STEPS = 40  # rows of the step table at most
ABRIDGE = {"threshold": 8, "edgeitems": 3, "max_line_width": 110}


class PropertyFailure(AssertionError):
    """A property of a user's collective failed; ``str()`` is the whole report.

    ``property``: the first property that broke (one of PROPERTIES); ``case``: the shrunk Case;
    ``outcome``: its Outcome (inputs, results, expected values, messages); ``diagram``: the PNG's path or None.
    """

    def __init__(self, outcome: Outcome, text: str, diagram: str | None = None):
        super().__init__(text)
        self.outcome, self.case, self.diagram = outcome, outcome.case, diagram
        self.property = outcome.failures[0][0]


def describe_failure(
    fn: Callable[..., Any],
    outcome: Outcome,
    diagram: str | None = None,
    notes: Sequence[str] = (),
    timeout: float = 10.0,
    roles: tuple[str, ...] | None = None,
) -> PropertyFailure:
    """The PropertyFailure of a failed Outcome, with its report (and the diagram drawn where asked)."""
    case = outcome.case
    name = getattr(fn, "__qualname__", repr(fn))
    broken = [p for p, _ in outcome.failures]
    signature = f" with the signature fn({getattr(roles, 'text', '') or ', '.join(roles)})" if roles else ""
    lines = [f"{name} breaks {', '.join(repr(p) for p in broken)} as {case.collective}{signature}"]
    lines += [f"  {prop}: {what}" for prop, what in outcome.failures]
    intermittent = any(note.startswith("intermittent") for note in notes)
    lines.append(f"{'failing case' if intermittent else 'smallest failing case'}: {case}")
    lines += list(notes) + outcome.notes
    if case.layout != "world":
        lines.append(
            f"note: the function ran on a communicator made by Split ({case.layout}): its ranks are 0..q-1 of its "
            "group; code that uses MPI.COMM_WORLD's rank or size, or a world rank, breaks there"
        )
    lines.append("properties: " + ", ".join(f"{p} {'FAILED' if p in broken else 'ok'}" for p in outcome.checked))
    lines += _inputs(outcome) + _answers(outcome)
    traced_dtype = "int64" if roles is None else "float64"
    lines += [f"messages, step by step (the same function on traceable {traced_dtype} values, p and n as above):"]
    try:
        table, traced = step_table(fn, case, timeout, roles)
    except Exception as exc:  # noqa: BLE001  (the table is a help; the report stands without it)
        table, traced = [f"(not tabulated: {type(exc).__name__}: {exc})"], None
    lines += ["  " + row for row in table]
    try:
        path = _diagram(traced or outcome, diagram, outcome.first_wrong)
    except OSError as exc:  # a folder that cannot be made or written: the report is printed all the same
        path = None
        lines.append(f"space-time diagram not saved: {type(exc).__name__}: {exc}")
    if path:
        lines.append(f"space-time diagram of the failing run: {path}")
    again = f", signature={','.join(roles)!r}" if roles else ""
    lines.append(f"reproduce: collectives.testing.run_case(fn, collectives.testing.{case!r}{again})")
    return PropertyFailure(outcome, "\n".join(lines), path)


def _item(v: Any) -> str:
    """A NumPy scalar as Python writes it (1.5, not np.float64(1.5))."""
    return repr(v.item() if isinstance(v, np.generic) and v.dtype.names is None else v)


def _abridged(x: Any) -> str:
    return "None" if x is None else np.array2string(np.asarray(x), **ABRIDGE)  # type: ignore[arg-type]


def _inputs(outcome: Outcome) -> list[str]:
    lines = ["inputs (abridged):"]
    case = outcome.case
    if case.collective == "alltoallv":
        c = matrix(case, case.p)
        lines.append(f"  counts (row i: what rank i sends to each rank j): {c.tolist() if case.p <= 8 else c.shape}")
    elif case.collective.endswith("v"):
        lines.append(f"  counts (rank r's block): {counts(case, case.p)}")
    for w, arrays in enumerate(outcome.inputs[:8]):
        shown = "; ".join(f"{k} = {_abridged(v)}" for k, v in arrays.items() if k != "buf")
        lines.append(f"  rank {w}: {shown}")
    if outcome.case.p > 8:
        lines.append(f"  ... ranks 8..{outcome.case.p - 1} likewise")
    return lines


def _answers(outcome: Outcome) -> list[str]:
    if not outcome.results:
        return []
    lines = ["expected against got:"]
    if "result" not in (p for p, _ in outcome.failures):
        lines.append(f"  (the results are right; what failed is '{outcome.failures[0][0]}', above)")
    for w, (want, got) in enumerate(zip(outcome.expected, outcome.results)):
        if w >= 8 and (outcome.first_wrong is None or w != outcome.first_wrong[0]):
            continue
        if want is None:
            lines.append(f"  rank {w}: (no result expected) got {_abridged(got)}")
        else:
            lines.append(f"  rank {w}: expected {_abridged(want.value)}")
            lines.append(f"  {'':>{len(str(w)) + 5}} got      {_abridged(got)}")
    if outcome.first_wrong is not None:
        w, i = outcome.first_wrong
        want = outcome.expected[w]
        assert want is not None
        lines.append(
            f"first wrong: rank {w}, element {i}: expected {_item(want.value[i])}, got {_item(outcome.results[w][i])}"
        )
    return lines


# -- the step table -------------------------------------------------------------------------------------
def decode(values: np.ndarray) -> list[tuple[tuple[int, ...], int] | None]:
    """(the ranks a traceable value sums, its element index), or None for a value no partial sum can be."""
    out: list[tuple[tuple[int, ...], int] | None] = []
    for v in values.tolist():
        ranks = tuple(r for r in range(TRACE_BITS) if (v >> r) & 1)
        high = v >> TRACE_BITS
        out.append((ranks, high // len(ranks)) if ranks and v >= 0 and high % len(ranks) == 0 else None)
    return out


def describe(data: bytes | None, dtype: str = "int64") -> str:
    """A message's traceable contents as runs: 'x0+x1[2:4]' is elements 2..3 summed over ranks 0 and 1."""
    raw = data or b""
    if len(raw) % np.dtype(dtype).itemsize:
        return f"{len(raw)} bytes (not whole {dtype} values)"
    values = np.frombuffer(raw, dtype).astype(np.int64)
    if values.size == 0:
        return "nothing"
    runs: list[list[Any]] = []  # [ranks, first element, last element]
    for item in decode(values):
        if item is not None and runs and runs[-1][0] == item[0] and runs[-1][2] == item[1] - 1:
            runs[-1][2] = item[1]
        else:
            runs.append([item[0], item[1], item[1]] if item else [None, 0, 0])
    parts = []
    for ranks, lo, hi in runs[:4]:
        if ranks is None:
            parts.append("?")
            continue
        who = "+".join(f"x{r}" for r in ranks)
        parts.append(f"{who if len(ranks) == 1 else '(' + who + ')'}[{lo}:{hi + 1}]")
    return ", ".join(parts) + (f", ... ({len(runs)} runs)" if len(runs) > 4 else "")


def step_table(
    fn: Callable[..., Any], case: Case, timeout: float = 10.0, roles: tuple[str, ...] | None = None
) -> tuple[list[str], Outcome | None]:
    """One row per logical step, every message sent then as 'source->dest contents'; and the traced run.

    The traced values are int64, or float64 (exact below 2^53) for a course's signature, whose
    contract is usually float64."""
    if case.p > TRACE_BITS - 8:
        return [f"(not tabulated: traceable values need p <= {TRACE_BITS - 8})"], None
    dtype = "int64" if roles is None else "float64"
    traced = case.with_(dtype=dtype, op="sum" if case.op else None, values="traceable", layout="world")
    try:
        outcome = run_case(fn, traced, timeout=timeout, record_data=True, signature=roles)
    except AttributeError as exc:  # NotOffered on these values: no table, the report stands
        return [f"(not tabulated: {exc})"], None
    rows: dict[int, list[str]] = {}
    for m in outcome.messages:
        rows.setdefault(m.step, []).append(f"{m.source}->{m.dest} {describe(m.data, dtype)}")
    lines = [f"step {step + 1:>3}: " + " | ".join(rows[step]) for step in sorted(rows)[:TABLE_STEPS]]
    if len(rows) > TABLE_STEPS:
        lines.append(f"... {len(rows) - TABLE_STEPS} more steps")
    if not lines:
        lines.append("(no messages)")
    if any("?" in line for line in lines):
        lines.append("('?': a value no partial sum of the inputs can be: a buffer sent before it was filled?)")
    if not outcome.ok:
        lines.append(f"on these values too: {outcome.failures[0][0]}: {outcome.failures[0][1].splitlines()[0]}")
    return lines, outcome


def _diagram(outcome: Outcome, path: str | None, first_wrong: tuple[int, int] | None) -> str | None:
    """Draw a run's messages, labelled with their contents where they were recorded, the first wrong rank
    in red; None without matplotlib or messages."""
    if path == "" or not outcome.messages:
        return None
    try:
        from collectives.diagram import spacetime

        if path is None:
            path = tempfile.NamedTemporaryFile(prefix="collectives-check-", suffix=".png", delete=False).name
        marked = {first_wrong[0]} if first_wrong else set()
        c = outcome.case
        title = f"{c.collective}, p = {c.p}, n = {c.n}" + (", traceable values" if c.values == "traceable" else "")
        labels = [describe(m.data, c.dtype) if m.data is not None else "" for m in outcome.messages]
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        spacetime(outcome.messages, c.p, path, title=title, highlight=marked, labels=labels, tag_names={})
    except ImportError:
        return None
    return path
