"""What ``python -m collectives.bench`` measures when not told, and how it stops.

The sizes come from the machine: powers of 4 from 1 KiB up to 64 MiB per rank, or up to 1 MiB when the
ranks outnumber the cores (a rank then runs on a share of a core, and the 64 MiB rows would take minutes),
and never more than 1/16 of the free memory per rank (the input, the result and an algorithm's buffers).
A time budget (60 s unless ``--budget`` says otherwise) is shared equally by the sizes: a size's repeats
(up to ``default_repeats``) end when its share is spent, after at least ``MIN_REPEATS``. The plan is
printed before the first row, so "will this take one minute or ten?" has its answer.

Ctrl-C (SIGINT, passed on to every rank by mpiexec) ends the run after the repeat in progress: the ranks
agree on it with a one-integer allreduce after each repeat (a rank that left alone would leave the others
waiting in their next barrier). The rows measured so far are printed, and the job exits with 130. A second
Ctrl-C stops at once.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from types import FrameType
from typing import Any

import numpy as np

MIN_REPEATS = 5  # fewer, and a median is one unlucky timing away from noise
DEFAULT_BUDGET_S = 60.0
EXIT_INTERRUPTED = 128 + signal.SIGINT


def free_memory() -> int:
    """Bytes of memory available to new processes (Linux's MemAvailable; unknown elsewhere: no limit)."""
    from collectives.virtual_time.trace import available_memory

    return available_memory()


def machine_sizes(p: int, cores: int, memory: int) -> list[int]:
    """Bytes per rank: 1 KiB, 4 KiB, ... up to 64 MiB (1 MiB when ``p`` > ``cores``), at most ``memory`` / (16 p)."""
    top = min((1 << 20) if p > cores else (64 << 20), memory // (16 * p))
    sizes = [1 << 10]
    while sizes[-1] * 4 <= top:
        sizes.append(sizes[-1] * 4)
    return sizes


def describe(p: int, cores: int, sizes: list[int], budget_s: float, human: Any) -> str:
    """The plan in one line (rank 0 prints it before the first row)."""
    crowded = " (more ranks than cores: sizes up to 1M)" if p > cores else ""
    return (
        f"# plan: {p} ranks on {cores} cores{crowded}; {len(sizes)} sizes {human(sizes[0])}..{human(sizes[-1])}, "
        f"up to 200 repeats each in about {budget_s / len(sizes):.0f} s; about {budget_s:.0f} s in all "
        "(--sizes, --repeats, --budget change it; Ctrl-C stops after the repeat in progress)"
    )


class Budget:
    """The run's time, shared by the sizes, and Ctrl-C: both end a size's repeats after the same repeat on all ranks."""

    def __init__(self, seconds: float):
        self.seconds, self.started = seconds, time.monotonic()
        self.deadline, self.repeats_done = float("inf"), 0
        self.signals, self.interrupted = 0, False
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGINT, self.handler)

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals > 1:
            sys.stderr.write("second Ctrl-C: stopped at once\n")
            os._exit(EXIT_INTERRUPTED)

    def start_size(self, sizes_left: int) -> None:
        """A new size begins: it gets an equal share of the time left."""
        now = time.monotonic()
        self.deadline = now + max(self.seconds - (now - self.started), 0.0) / sizes_left

    def agreed(self, comm: Any, repeats_done: int) -> bool:
        """True on every rank when some rank got Ctrl-C, or spent its share after ``MIN_REPEATS`` (collective)."""
        from mpi4py import MPI

        self.repeats_done = repeats_done
        late = repeats_done >= MIN_REPEATS and time.monotonic() > self.deadline
        verdict = np.array([2 * (self.signals > 0) + late], dtype=np.int64)
        comm.Allreduce(MPI.IN_PLACE, verdict, op=MPI.MAX)
        self.interrupted = self.interrupted or verdict[0] >= 2
        return bool(verdict[0])
