"""Timings worth reading: interleaved repeats, the median with its spread, and peak memory.

On a shared machine one measurement per configuration says more about the load at that moment than
about the configuration. So every comparison in the tutorials and benchmarks measures each
configuration several times, interleaved (round r runs every configuration once, so a change of load
falls on all alike), and reports the median with the min-max spread, saying when the spread shows the
machine was busy.

    samples = interleaved({"ring": run_ring, "tree": run_tree}, repeats=5)   # name -> [5 values]
    median, lo, hi = spread(samples["ring"])
    print(busy_note(samples))
"""

from __future__ import annotations

import resource
import time
from collections.abc import Callable


def interleaved(configs: dict[str, Callable[[], float]], repeats: int = 5) -> dict[str, list[float]]:
    """Call each configuration's measure function ``repeats`` times, interleaved; name -> measurements."""
    samples: dict[str, list[float]] = {name: [] for name in configs}
    for _ in range(repeats):
        for name, measure in configs.items():
            samples[name].append(float(measure()))
    return samples


def seconds(fn: Callable[[], object]) -> Callable[[], float]:
    """A measure function: the wall-clock seconds of one call of ``fn``."""

    def measure() -> float:
        t0 = time.perf_counter()
        fn()
        return time.perf_counter() - t0

    return measure


def spread(values: list[float]) -> tuple[float, float, float]:
    """(median, min, max) of repeated measurements."""
    ordered = sorted(values)
    n = len(ordered)
    median = ordered[n // 2] if n % 2 else 0.5 * (ordered[n // 2 - 1] + ordered[n // 2])
    return median, ordered[0], ordered[-1]


def relative_spread(values: list[float]) -> float:
    """(max - min) / median: 0.2 means the repeats span 20% of the median."""
    median, lo, hi = spread(values)
    return (hi - lo) / median if median else 0.0


def busy_note(samples: dict[str, list[float]], limit: float = 0.2) -> str:
    """One line: the largest relative spread, and that the machine was busy when it exceeds ``limit``."""
    worst = max(relative_spread(v) for v in samples.values())
    if worst > limit:
        return f"spread up to {100 * worst:.0f}% of the median (> {100 * limit:.0f}%): the machine was busy"
    return f"spread at most {100 * worst:.0f}% of the median"


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
