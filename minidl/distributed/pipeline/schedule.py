"""Pipeline schedules: in what order each stage runs its forwards and backwards, and how it went.

A mini-batch is cut into m micro-batches that flow through p stages (one per rank). Stage s runs
F(i), the forward of micro-batch i, once stage s-1 has sent it F(i)'s output, and B(i), the backward,
once stage s+1 has sent it the gradient of that output. A *schedule* is the order of the 2m ops on
each stage; any order that respects those dependencies gives the same gradients.

GPipe (Huang et al. 2019): every forward, then every backward. Simple, but stage s holds the
activations of all m micro-batches at once (they are needed by the backwards).

1F1B, PipeDream-Flush (Narayanan et al. 2021): stage s runs w = min(p - s - 1, m) warm-up forwards,
then alternates one forward and one backward, then finishes the last w backwards (cool-down). A
backward frees its micro-batch's activations as soon as possible, so stage s holds at most
min(p - s, m) micro-batches at a time instead of m, and the pipeline takes the same time.

Both flush the pipeline at the end of every mini-batch (one optimizer step after all m backwards),
so the result is exactly that of one process training on the whole mini-batch. The price is the
*bubble*: with forward and backward times t_f, t_b per micro-batch on every stage, the schedule
takes (m + p - 1)(t_f + t_b) while each stage computes for m(t_f + t_b), so each stage idles for

    bubble = (p - 1) / (m + p - 1)

of the time (GPipe's formula; both schedules have the same bubble).

What was measured: ``Event`` (stage, micro-batch, "F" or "B", start, end) per op, in seconds since
the step began. ``bubble_fraction(events)`` is the idle share of the rectangle p stages x span, where
span runs from the first op's start to the last op's end on any stage:

    measured bubble = 1 - (sum over all ops of their durations) / (p * span).

With equal op times and free communication it equals the formula; waiting for a message, a slow
stage or the operating system shows up as extra bubble. ``plot_schedule`` draws the events.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

FORWARD, BACKWARD = "F", "B"
SCHEDULES = ("gpipe", "1f1b")


@dataclass(frozen=True)
class Event:
    """One op as it ran: ``stage`` ran the forward ("F") or backward ("B") of micro-batch ``micro``
    from ``start`` to ``end`` (seconds since the step began on that stage)."""

    stage: int
    micro: int
    kind: str
    start: float
    end: float

    @property
    def duration(self) -> float:
        return self.end - self.start


def check_schedule_args(num_micro: int, num_stages: int, stage: int) -> None:
    if int(num_micro) != num_micro or num_micro < 1:
        raise ValueError(f"pipeline: the number of micro-batches must be an integer >= 1, got {num_micro!r}")
    if int(num_stages) != num_stages or num_stages < 1:
        raise ValueError(f"pipeline: the number of stages must be an integer >= 1, got {num_stages!r}")
    if not 0 <= stage < num_stages:
        raise ValueError(f"pipeline: stage {stage} out of range for {num_stages} stages")


def gpipe(num_micro: int, num_stages: int, stage: int) -> list[tuple[str, int]]:
    """GPipe's order on ``stage``: F(0) .. F(m-1), then B(0) .. B(m-1)."""
    check_schedule_args(num_micro, num_stages, stage)
    return [(FORWARD, i) for i in range(num_micro)] + [(BACKWARD, i) for i in range(num_micro)]


def one_f_one_b(num_micro: int, num_stages: int, stage: int) -> list[tuple[str, int]]:
    """1F1B (PipeDream-Flush) on ``stage``: w = min(p - s - 1, m) warm-up forwards, then F(w + i), B(i)
    for i = 0 .. m - w - 1, then the cool-down backwards B(m - w) .. B(m - 1)."""
    check_schedule_args(num_micro, num_stages, stage)
    warmup = min(num_stages - stage - 1, num_micro)
    ops = [(FORWARD, i) for i in range(warmup)]
    for i in range(num_micro - warmup):
        ops += [(FORWARD, warmup + i), (BACKWARD, i)]
    return ops + [(BACKWARD, i) for i in range(num_micro - warmup, num_micro)]


def schedule(name: str, num_micro: int, num_stages: int, stage: int) -> list[tuple[str, int]]:
    """The op order of schedule ``name`` ("gpipe" or "1f1b") on ``stage``."""
    if name == "gpipe":
        return gpipe(num_micro, num_stages, stage)
    if name == "1f1b":
        return one_f_one_b(num_micro, num_stages, stage)
    raise ValueError(f"pipeline: schedule must be one of {SCHEDULES}, got {name!r}")


def peak_in_flight(ops: Sequence[tuple[str, int]]) -> int:
    """The most micro-batches whose forward has run and backward has not (activations held), in ``ops``."""
    held = peak = 0
    for kind, _ in ops:
        held += 1 if kind == FORWARD else -1
        peak = max(peak, held)
    return peak


def ideal_events(
    name: str, num_micro: int, num_stages: int, t_forward: float = 1.0, t_backward: float = 2.0
) -> list[Event]:
    """The timeline schedule ``name`` would have with every forward taking ``t_forward``, every backward
    ``t_backward`` and free communication (see ``timeline``). The yardstick for the measured one."""
    ops = [schedule(name, num_micro, num_stages, s) for s in range(num_stages)]
    return timeline(ops, t_forward, t_backward, name=name)


def timeline(
    ops: Sequence[Sequence[tuple[str, int]]], t_forward: float = 1.0, t_backward: float = 2.0, name: str = "given"
) -> list[Event]:
    """Run the op orders ``ops[s]`` of every stage s with fixed op times and free communication: each op
    starts once its stage is free and its input is there (F(s, i) after F(s-1, i); B(s, i) after
    B(s+1, i)). Every stage must list each F(i) and B(i), i < m, once; a RuntimeError names a deadlock."""
    num_stages, num_micro = len(ops), sum(len(o) for o in ops) // (2 * max(len(ops), 1))
    done: dict[tuple[str, int, int], float] = {}  # (kind, stage, micro) -> end time
    nxt, free, events = [0] * num_stages, [0.0] * num_stages, []
    while len(events) < sum(len(o) for o in ops):
        progressed = False
        for s in range(num_stages):
            while nxt[s] < len(ops[s]):
                kind, i = ops[s][nxt[s]]
                dep = (FORWARD, s - 1, i) if kind == FORWARD else (BACKWARD, s + 1, i)
                if dep[1] in (-1, num_stages):
                    ready = 0.0
                elif dep in done:
                    ready = done[dep]
                else:
                    break  # waits for the neighbour
                start = max(free[s], ready)
                free[s] = done[(kind, s, i)] = start + (t_forward if kind == FORWARD else t_backward)
                events.append(Event(s, i, kind, start, free[s]))
                nxt[s] += 1
                progressed = True
        if not progressed:
            waits = ", ".join(f"stage {s} at {ops[s][nxt[s]]}" for s in range(num_stages) if nxt[s] < len(ops[s]))
            raise RuntimeError(f"pipeline: schedule {name!r} deadlocks (m={num_micro}, p={num_stages}): {waits}")
    return events


# ----------------------------------------------------------------------------- measuring
def bubble_formula(num_micro: int, num_stages: int) -> float:
    """GPipe's idle fraction (p - 1) / (m + p - 1)."""
    return (num_stages - 1) / (num_micro + num_stages - 1)


def span(events: Sequence[Event]) -> float:
    """Time from the first op's start to the last op's end, over all stages."""
    return max(e.end for e in events) - min(e.start for e in events)


def bubble_fraction(events: Sequence[Event], num_stages: int | None = None) -> float:
    """Idle share of the p x span rectangle: 1 - (total op time) / (p * span). See the module doc."""
    if not events:
        raise ValueError("bubble_fraction: no events")
    p = num_stages or len({e.stage for e in events})
    return 1.0 - sum(e.duration for e in events) / (p * span(events))


def stage_idle_fractions(events: Sequence[Event]) -> dict[int, float]:
    """Per stage, the idle share of the common span (their mean is ``bubble_fraction``)."""
    total = span(events)
    busy: dict[int, float] = {}
    for e in events:
        busy[e.stage] = busy.get(e.stage, 0.0) + e.duration
    return {s: 1.0 - b / total for s, b in sorted(busy.items())}


def events_to_array(events: Sequence[Event]) -> np.ndarray:
    """Events as a float64 array [n, 5] (stage, micro, 0 for F / 1 for B, start, end): sendable as a buffer."""
    rows = [(e.stage, e.micro, 0.0 if e.kind == FORWARD else 1.0, e.start, e.end) for e in events]
    return np.array(rows, dtype=np.float64).reshape(-1, 5)


def events_from_array(a: np.ndarray) -> list[Event]:
    return [Event(int(s), int(i), FORWARD if k == 0 else BACKWARD, float(t0), float(t1)) for s, i, k, t0, t1 in a]


def plot_schedule(
    events: Sequence[Event], path: str | None = None, title: str = "", ax: Any = None, measured: bool = True
) -> Any:
    """Draw the schedule as it ran: stages on the y axis (stage 0 on top), time on the x axis, one box
    per op, forwards blue and backwards orange, each labelled with its micro-batch. Returns the axes;
    with ``path``, saves the figure there (matplotlib is needed only here). ``measured=False`` titles an
    ``ideal_events`` timeline's bubble without the word "measured"."""
    import matplotlib.pyplot as plt

    if not events:
        raise ValueError("plot_schedule: no events")
    t0 = min(e.start for e in events)
    stages = sorted({e.stage for e in events})
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.6 * len(stages) + 1.2))
    colors = {FORWARD: "#4C72B0", BACKWARD: "#DD8452"}
    for e in events:
        x, w = (e.start - t0) * 1e3, e.duration * 1e3
        ax.broken_barh([(x, w)], (e.stage - 0.4, 0.8), facecolors=colors[e.kind], edgecolors="white", linewidth=0.5)
        ax.text(x + w / 2, e.stage, str(e.micro), ha="center", va="center", fontsize=7, color="white")
    ax.set_yticks(stages, [f"stage {s}" for s in stages])
    ax.set_ylim(max(stages) + 0.6, min(stages) - 0.6)
    ax.set_xlabel("time since the step began (ms)")
    bubble = bubble_fraction(events, len(stages))
    ax.set_title(f"{title}  {'measured ' if measured else ''}bubble {bubble:.2f}".strip())
    ax.legend(
        handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colors.values()],
        labels=["forward", "backward"],
        loc="upper left",
        bbox_to_anchor=(1.0, 1.0),
        fontsize=8,
    )
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
        if fig is not None:
            plt.close(fig)
    return ax
