"""The space-time diagram of a simulated run: ranks as lines, every point-to-point message an arrow.

    res = collectives.simulate(4, lambda comm: collectives.ring.allreduce(comm, np.arange(8.0), np.add))
    fig = collectives.diagram.spacetime(res.messages, 4, "ring.png")

Rank r is the horizontal line y = r (rank 0 on top); the x axis is the logical clock of the in-process
communicator (``collectives.simulate``: a step is one round of communication). A message sent at step s and
received at clock a is an arrow from (s, source) to (a, dest): the space-time diagram of Lamport's "Time, Clocks,
and the Ordering of Events in a Distributed System" (1978), turned on its side. Arrows are coloured by phase (the
message's tag: reduce-scatter, allgather, ...) and grow wider with the bytes they carry; a message never received
(the run deadlocked) is dashed. matplotlib is imported only when a diagram is drawn.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from collectives import common
from collectives.common import PHASES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

    from collectives.inprocess import Message

# Every tag of collectives/common.py by its name (TAG_REDUCE_SCATTER: "reduce-scatter"), walkthrough's names first.
TAG_NAMES = {v: k[4:].lower().replace("_", "-") for k, v in vars(common).items() if k.startswith("TAG_")} | PHASES
HIGHLIGHT = "#d62728"  # red: the ranks or messages to look at (a checker's first wrong rank)
_PALETTE = ["C0", "C1", "C2", "C4", "C5", "C6", "C8", "C9", "C7"]  # matplotlib's cycle without its red
_FONT = 7.0  # points, for the labels on arrows
_RANK_IN = 0.7  # inches between two ranks' lines


def _width(text: str) -> float:
    """Estimated width in inches of ``text`` at _FONT points (DejaVu Sans: about 0.7 em a character)."""
    return len(text) * _FONT * 0.7 / 72


def spacetime(
    messages: Sequence[Message],
    nprocs: int,
    path: str | Path | None = None,
    *,
    labels: Sequence[str] | Callable[[Message], str] | None = None,
    title: str = "",
    highlight: Collection[int | Message] | None = None,
    tag_names: dict[int, str] | None = None,
) -> Figure:
    """Draw ``messages`` (a ``SimulationResult.messages``) between ``nprocs`` ranks; save a PNG at ``path``.

    ``labels``: one string per message, or a function of the message ("b3=x0+x1"), written on its arrow.
    ``highlight``: ranks (ints) whose lines, and messages (the very objects) whose arrows, are drawn in red.
    ``tag_names``: the legend's name of each tag (default: the package's phases, TAG_NAMES; a user's own
    code passes {} and its messages are named "tag 1", ...).
    Returns the matplotlib Figure (one ``FancyArrowPatch`` per message in ``fig.axes[0].patches``).
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("collectives.diagram.spacetime draws with matplotlib: pip install matplotlib") from None
    texts = _labels(messages, labels)
    ranks, marked = _highlights(highlight, nprocs)
    for m in messages:
        if not (0 <= m.source < nprocs and 0 <= m.dest < nprocs):
            raise ValueError(f"spacetime: message {m.source} -> {m.dest} names a rank outside 0..{nprocs - 1}")
    end = max([_arrival(m) for m in messages] + [1])
    step_in = min(max(0.45, 1.15 * max(map(_width, texts), default=0.0) + 0.15), 16.0 / end)
    fig = Figure(figsize=(2.6 + step_in * (end + 0.6), 1.0 + _RANK_IN * nprocs), layout="constrained")
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    ax.hlines(range(nprocs), 0, end, color="0.75", lw=1.0, zorder=0)
    for r in ranks:
        ax.hlines(r, 0, end, color=HIGHLIGHT, lw=2.5, zorder=0)
    colors = _arrows(ax, messages, marked, TAG_NAMES if tag_names is None else tag_names)
    if texts:
        _place_labels(ax, messages, texts, (step_in, _RANK_IN))
    ax.set(xlim=(-0.3, end + 0.3), ylim=(nprocs - 0.5, -0.5), xlabel="logical clock (steps)", title=title)
    ax.set_yticks(range(nprocs), [f"rank {r}" for r in range(nprocs)])
    for r in ranks:
        ax.get_yticklabels()[r].set(color=HIGHLIGHT, fontweight="bold")
    if end <= 40:
        ax.set_xticks(range(end + 1))
    ax.grid(axis="x", alpha=0.25)
    _legend(ax, colors, bool(marked) or bool(ranks), any(m.arrival is None for m in messages))
    if path is not None:
        fig.savefig(path, dpi=110)
    return fig


def _arrival(m: Message) -> int:
    """Where the arrow of ``m`` ends: its arrival, or one step on for a message never received."""
    return m.step + 1 if m.arrival is None else m.arrival


def _labels(messages: Sequence[Message], labels: Any) -> list[str]:
    if labels is None:
        return []
    texts = [labels(m) for m in messages] if callable(labels) else [str(t) for t in labels]
    if len(texts) != len(messages):
        raise ValueError(f"spacetime: {len(texts)} labels for {len(messages)} messages")
    return texts


def _highlights(highlight: Any, nprocs: int) -> tuple[set[int], set[int]]:
    """(ranks to mark, ids of messages to mark) from a mixed collection."""
    ranks = {int(h) for h in highlight or () if isinstance(h, (int, np.integer))}
    if any(not 0 <= r < nprocs for r in ranks):
        raise ValueError(f"spacetime: highlight names ranks {sorted(ranks)}, outside 0..{nprocs - 1}")
    return ranks, {id(h) for h in highlight or () if not isinstance(h, (int, np.integer))}


def _arrows(ax: Any, messages: Sequence[Message], marked: set[int], names: dict[int, str]) -> dict[str, str]:
    """One arrow per message; returns the colour of each phase drawn, in order of first use."""
    from matplotlib.patches import FancyArrowPatch

    colors: dict[str, str] = {}
    biggest = max([m.nbytes for m in messages] + [1])
    for m in messages:
        phase = names.get(m.tag, f"tag {m.tag}")
        color = colors.setdefault(phase, _PALETTE[len(colors) % len(_PALETTE)])
        lost = m.arrival is None
        arrow = FancyArrowPatch(
            (m.step, m.source),
            (_arrival(m), m.dest),
            arrowstyle="-|>",
            mutation_scale=9,
            color=HIGHLIGHT if id(m) in marked else color,
            lw=0.8 + 1.7 * m.nbytes / biggest,
            linestyle="--" if lost else "-",
            shrinkA=2,
            shrinkB=2,
            zorder=2,
        )
        ax.add_patch(arrow)
    return colors


def _place_labels(ax: Any, messages: Sequence[Message], texts: list[str], inch: tuple[float, float]) -> None:
    """Write each label on its arrow, at the first point along it (half way, then nearer either end) where it
    overlaps no label already placed; sizes are estimated in inches from the figure's scale ``inch``."""
    placed: list[tuple[float, float, float]] = []  # centre x, y (inches) and half width
    half_h = _FONT * 1.3 / 72 / 2
    for m, text in zip(messages, texts):
        if not text:
            continue
        x1 = _arrival(m)
        half_w = _width(text) / 2
        best, fewest = (0.0, 0.0), len(placed) + 1
        for t in (0.5, 0.4, 0.6, 0.3, 0.7, 0.2, 0.8):
            x, y = m.step + t * (x1 - m.step), m.source + t * (m.dest - m.source)
            hits = sum(
                abs(x * inch[0] - px) < half_w + pw and abs(y * inch[1] - py) < 2 * half_h for px, py, pw in placed
            )
            if hits < fewest:
                best, fewest = (x, y), hits
            if hits == 0:
                break
        placed.append((best[0] * inch[0], best[1] * inch[1], half_w))
        box = dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.85)
        ax.text(*best, text, fontsize=_FONT, ha="center", va="center", zorder=3, bbox=box)


def _legend(ax: Any, colors: dict[str, str], marked: bool, lost: bool) -> None:
    handles = [ax.plot([], [], color=c, lw=2, label=phase)[0] for phase, c in colors.items()]
    if marked:
        handles += ax.plot([], [], color=HIGHLIGHT, lw=2.5, label="highlighted")
    if lost:
        handles += ax.plot([], [], color="0.3", ls="--", label="never received")
    if handles:
        ax.legend(handles=handles, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), title="phase")
