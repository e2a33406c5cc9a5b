"""Where a data-parallel step's time goes: compute, wait, communication.

- **compute**: this rank's own work: the forward and backward passes (everything between the end
  of one synchronization and the start of the next, data loading included) and the update itself.
- **wait**: time spent in a barrier just before the gradients are exchanged, waiting for the slowest
  rank to finish its backward pass: load imbalance and stragglers, not the network.
- **communication**: packing the gradients into fusion buffers, the allreduces, unpacking.

Per-rank throughput falls as ranks are added ("Deep Learning: massively scaled parallel approach using hybrid supercomputers", 2017: ~15x on 32 nodes) because communication
and wait grow while compute per rank stays the same; this breakdown shows which one grew.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

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
