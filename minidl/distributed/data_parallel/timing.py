"""Where a data-parallel step's time goes: compute, wait, communication.

- **compute**: this rank's own work: the forward and backward passes (everything between the end
  of one synchronization and the start of the next, data loading included) and the update itself.
- **wait**: time spent in a barrier just before the gradients are exchanged, waiting for the slowest
  rank to finish its backward pass: load imbalance and stragglers, not the network.
- **communication**: packing the gradients into fusion buffers, the allreduces, unpacking.

Per-rank throughput falls as ranks are added ("Deep Learning: massively scaled parallel approach using hybrid supercomputers", 2017: ~15x on 32 nodes) because communication
and wait grow while compute per rank stays the same; this breakdown shows which one grew.

``ExchangeClock`` is the context a step's exchange runs in: it charges these phases, records each
bucket on a ``Timeline`` when one is kept (``--timeline``), and names the step for the watchdog
(``timeout.activity``: a rank that waits past ``MINIDL_COMM_TIMEOUT`` says which step it was in).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from minidl.distributed.timeout import activity

PHASES = ("compute", "wait", "communication")


@dataclass
class StepTimings:
    """Seconds per phase for the last optimizer step (``last``) and summed over all steps (``total``)."""

    last: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    total: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    steps: int = 0
    _current: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    _mark: float | None = None

    def add(self, phase: str, seconds: float) -> None:
        """Charge ``seconds`` to ``phase`` in the step under way."""
        self._current[phase] += seconds

    def mark(self) -> float:
        """Charge the time since the previous mark to compute; return the clock's reading."""
        now = time.perf_counter()
        if self._mark is not None:
            self._current["compute"] += now - self._mark
        self._mark = now
        return now

    def restart(self) -> None:
        """Start the compute clock now (e.g. after evaluation, which should not count as training)."""
        self._mark = time.perf_counter()

    def end_step(self) -> None:
        """Close the step under way: it becomes ``last`` and is added to ``total``."""
        self.mark()
        self.last = self._current
        for k, v in self._current.items():
            self.total[k] += v
        self._current = dict.fromkeys(PHASES, 0.0)
        self.steps += 1

    def reset(self) -> None:
        self.total = dict.fromkeys(PHASES, 0.0)
        self.steps = 0

    def mean(self) -> dict[str, float]:
        """Average seconds per step of each phase."""
        return {k: v / max(self.steps, 1) for k, v in self.total.items()}

    @staticmethod
    def _format(t: dict[str, float]) -> str:
        total = sum(t.values()) or 1.0
        parts = ", ".join(f"{k} {1e3 * v:.1f} ms ({100 * v / total:.0f}%)" for k, v in t.items())
        return f"{1e3 * sum(t.values()):.1f} ms/step: {parts}"

    def summary(self) -> str:
        """One line: the mean step time and its breakdown, over all steps so far."""
        return f"mean over {self.steps} steps: {self._format(self.mean())}"

    def __str__(self) -> str:
        return f"last step: {self._format(self.last)}"


class ExchangeClock:
    """The instruments around a DistributedOptimizer's gradient exchange (none of them changes a number).

    ``timings``: a ``StepTimings``; ``timeline``: None, or a ``minidl.distributed.timeline.Timeline`` on
    which each bucket's exchange is drawn.
    """

    def __init__(self) -> None:
        self.timings = StepTimings()
        self.timeline: Any = None
        self._start = 0.0

    @contextlib.contextmanager
    def exchange(self, step: int) -> Iterator[None]:
        """One step's exchange: compute until now, communication from now to the end of the block."""
        self._start = self.timings.mark()  # forward + backward since the last step were compute
        with activity("DistributedOptimizer.step", step=step):
            yield
        self.timings.add("communication", time.perf_counter() - self._start)
        self.timings.restart()

    def waited(self) -> None:
        """The ranks have all arrived (a barrier, the step agreement): the time since ``exchange`` began was wait."""
        now = time.perf_counter()
        self.timings.add("wait", now - self._start)
        if self.timeline is not None:
            self.timeline.add("wait", self._start, now)
        self._start = now

    def bucket(self, k: int, bucket: Any, algorithm: str, began: float, thread: str) -> None:
        """Bucket k's exchange, from ``began`` until now, on the timeline (when one is kept)."""
        if self.timeline is None:
            return
        args = {"algorithm": algorithm, "bytes": int(bucket.nbytes), "tensors": len(bucket.params)}
        if bucket.rows:  # bytes: the whole table's, which only a dense fallback moves
            args["exchange"] = "non-zero rows by allgather (whole table when they are over half)"
        name = "rows exchange" if bucket.rows else "allreduce"
        self.timeline.add(f"{name} bucket {k}", began, time.perf_counter(), thread, **args)
