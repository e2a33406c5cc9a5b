"""``explain("ring", p=4, n=8)``: every transfer of a schedule, step by step, read off the simulator's record.

Rank r's vector is made so that any partial result names its own contents: element i of x_r is
2^r + 2^p i, so a sum over a set S of ranks is sum(2^r for r in S) + |S| 2^p i, whose low p bits
are S and whose high bits give the element index i. The real schedule runs on the simulated
communicator with every message's bytes recorded (``simulate(..., record_data=True)``), and each
message is decoded into "which block, carrying which partial sum, to whom". Nothing is drawn from
a description of the algorithm: what is printed is what the code sent.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import IO, Any

import numpy as np

from collectives.algorithms import naive, rabenseifner, recursive_doubling, ring, tree
from collectives.common import PHASES, block_bounds
from collectives.inprocess import Message, simulate

SCHEDULES = {
    "naive": naive.allreduce,
    "tree": tree.allreduce,
    "ring": ring.allreduce,
    "recursive_doubling": recursive_doubling.allreduce,
    "rabenseifner": rabenseifner.allreduce,
}


def rank_vectors(p: int, n: int) -> list[np.ndarray]:
    """x_r[i] = 2^r + 2^p i (int64): every partial sum says which ranks and which element it holds."""
    if p > 24 or n > 1 << 20:
        raise ValueError(f"explain: p <= 24 and n <= 2^20 keep the encoding in int64; got p={p}, n={n}")
    return [(1 << r) + (np.arange(n, dtype=np.int64) << p) for r in range(p)]


def decode(value: int, p: int) -> tuple[tuple[int, ...], int]:
    """(the ranks a partial sum covers, its element index)."""
    ranks = tuple(r for r in range(p) if value >> r & 1)
    return ranks, (value >> p) // max(len(ranks), 1)


def describe_message(m: Message, p: int, n: int) -> str:
    """'b3=x0+x1 -> 2': the blocks a message carries, their partial sum, and its destination."""
    values = np.frombuffer(m.data or b"", np.int64)
    if values.size == 0:
        return f"nothing -> {m.dest}"
    decoded = [decode(int(v), p) for v in values]
    ranks = {r for r, _ in decoded}
    index = [i for _, i in decoded]
    b = block_bounds(n, p)
    lo, hi = index[0], index[-1] + 1
    if index != list(range(lo, hi)):
        where = f"elements {index}"
    elif lo in b and hi in b:
        first, last = b.index(lo), b.index(hi) - 1
        while first < last and b[first + 1] == lo:  # skip empty blocks
            first += 1
        where = f"b{first}" if first == last else f"b{first}-{last}"
    else:
        where = f"elements {lo}:{hi}"
    total = "+".join(f"x{r}" for r in sorted(ranks.pop())) if len(ranks) == 1 else "mixed"
    return f"{where}={total} -> {m.dest}"


def explain(
    algorithm: str | Callable[..., Any] = "ring",
    p: int = 4,
    n: int = 8,
    file: IO[str] | None = sys.stdout,
    collective: str = "allreduce",
) -> str:
    """Print (to ``file``, unless None) and return the table of every transfer of a schedule.

    ``algorithm``: a name of SCHEDULES, or your own function with the signature the property-test
    kit gives ``collective`` (collectives/kit/spec.py; an allreduce is ``fn(comm, x, f)``).
    One line per step: what each rank sends ("b3=x0+x1 -> 2": block 3, holding the sum of ranks 0
    and 1's contributions, to rank 2). Blocks are np.array_split's p blocks of the n elements.
    A schedule that ends with a wrong result still gets its table, and a last line says which rank
    holds what instead; one that deadlocks or raises is reported in that last line.
    """
    if isinstance(algorithm, str) and algorithm not in SCHEDULES:
        raise ValueError(f"explain: unknown algorithm {algorithm!r}: expected one of {list(SCHEDULES)}")
    schedule = SCHEDULES[algorithm] if isinstance(algorithm, str) else algorithm
    name = algorithm if isinstance(algorithm, str) else getattr(algorithm, "__name__", "your function") + "()"
    if collective != "allreduce":
        return _explain_other(schedule, name, collective, p, n, file)
    xs = rank_vectors(p, n)
    try:
        res = simulate(p, lambda comm: schedule(comm, xs[comm.Get_rank()], np.add), record_data=True, timeout=20.0)
    except Exception as exc:  # noqa: BLE001  (a user's schedule may fail in any way; the table says how)
        return _emit(f"{name} allreduce, p = {p}, n = {n}: did not complete: {type(exc).__name__}: {exc}", file)
    lines = _table(name, res.messages, p, n)
    expected = np.sum(xs, axis=0)
    wrong = [r for r, out in enumerate(res) if not (isinstance(out, np.ndarray) and np.array_equal(out, expected))]
    if not wrong:
        lines.append(f"afterwards every rank holds {'+'.join(f'x{r}' for r in range(p))} in every block")
    for r in wrong[:4]:
        lines.append(f"WRONG: rank {r} {_first_wrong(res[r], expected, p)}")
    return _emit("\n".join(lines), file)


def _first_wrong(got: Any, expected: np.ndarray, p: int) -> str:
    """What a rank holds at its first wrong element, read as a partial sum where it is one."""
    if not isinstance(got, np.ndarray) or got.shape != expected.shape or got.dtype != expected.dtype:
        return f"returned {type(got).__name__} {getattr(got, 'shape', '')}, not an int64 array of {expected.shape}"
    i = int(np.flatnonzero(got != expected)[0])
    ranks, index = decode(int(got[i]), p)
    if index == i and sum(1 << r for r in ranks) + (len(ranks) * index << p) == got[i]:
        held = "+".join(f"x{r}" for r in ranks)
    else:
        held = f"{got[i]}, no partial sum of element {i} (a contribution added twice, another element's, or garbage)"
    return f"ends with {held} at element {i}, where x0+...+x{p - 1} belongs"


def _table(name: str, messages: list[Message], p: int, n: int) -> list[str]:
    cells: dict[int, dict[int, list[str]]] = {}
    phases: dict[int, str] = {}
    for m in messages:
        cells.setdefault(m.step, {}).setdefault(m.source, []).append(describe_message(m, p, n))
        phase = PHASES.get(m.tag, f"tag {m.tag}")
        if phase not in phases.get(m.step, ""):
            phases[m.step] = phases[m.step] + "/" + phase if m.step in phases else phase
    width = max([len("; ".join(c)) for row in cells.values() for c in row.values()] + [8])
    b = block_bounds(n, p)
    blocks = ", ".join(f"b{i} = {b[i]}:{b[i + 1]}" for i in range(p))
    lines = [
        f"{name} allreduce, p = {p}, n = {n}; x_r is rank r's vector; blocks (elements): {blocks}",
        (
            f"{'step':>4}  {'phase':<15}" + "".join(f"{'rank ' + str(r) + ' sends':<{width + 2}}" for r in range(p))
        ).rstrip(),
    ]
    for step in sorted(cells):
        row = cells[step]
        lines.append(
            f"{step + 1:>4}  {phases[step]:<15}"
            + "".join(f"{'; '.join(row.get(r, ['-'])):<{width + 2}}" for r in range(p)).rstrip()
        )
    return lines


def _explain_other(fn: Callable[..., Any], name: str, collective: str, p: int, n: int, file: IO[str] | None) -> str:
    """Any other collective: the kit's step table ('0->1 x0[2:4]': elements 2..3 of rank 0's input)."""
    from collectives.kit.cases import Case
    from collectives.kit.report import step_table
    from collectives.kit.spec import COLLECTIVES

    if collective not in COLLECTIVES:
        raise ValueError(f"explain: unknown collective {collective!r}: expected one of {list(COLLECTIVES)}")
    op = "sum" if COLLECTIVES[collective].reduces else None
    rows, _ = step_table(fn, Case(collective, p, n, "int64", op, values="traceable"))
    return _emit("\n".join([f"{name} {collective}, p = {p}, n = {n}; x_r is rank r's input"] + rows), file)


def _emit(text: str, file: IO[str] | None) -> str:
    if file is not None:
        print(text, file=file)
    return text
