"""A timeline of training, as Horovod's: where each rank's step time goes, in Chrome's trace format.

``--timeline FILE`` (or ``Timeline`` in a program of one's own) records, on every rank, spans of time:
forward, backward, each bucket's allreduce (on the communication thread when it overlaps the backward),
waiting for the slowest rank, the update. At the end every rank's spans travel to rank 0, which writes
one JSON file in the Trace Event Format: ``{"traceEvents": [...]}`` of complete events
(``"ph": "X"``, start ``ts`` and duration ``dur`` in microseconds), one ``pid`` per rank and one ``tid``
per thread (``main``, ``comm``). Open it in https://ui.perfetto.dev or chrome://tracing, or draw it
with matplotlib (tutorial 09: ``load`` gives the events back).

    timeline = Timeline(comm)
    with timeline.span("forward"):
        ...
    timeline.write("trace.json")          # collective: every rank calls it; rank 0 writes

Clocks: each rank measures from the moment all ranks left one barrier in ``Timeline(comm)``, so the
ranks' spans line up to within that barrier's skew (microseconds on one node).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

THREADS = {"main": 0, "comm": 1}


class Timeline:
    """This rank's recorded spans; ``write`` gathers every rank's into one Chrome trace."""

    def __init__(self, comm: Any):
        self.comm, self.rank = comm, comm.Get_rank()
        if comm.Get_size() > 1:
            comm.Barrier()
        self.t0 = time.perf_counter()
        self.events: list[dict[str, Any]] = []

    def add(self, name: str, start: float, end: float, thread: str = "main", **args: Any) -> None:
        """A span from ``start`` to ``end`` (``time.perf_counter()`` seconds) on ``thread``."""
        event = {"name": name, "ph": "X", "pid": self.rank, "tid": THREADS.get(thread, 0)}
        event |= {"ts": round(1e6 * (start - self.t0), 3), "dur": round(1e6 * (end - start), 3)}
        if args:
            event["args"] = args
        self.events.append(event)

    @contextmanager
    def span(self, name: str, thread: str = "main", **args: Any) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, start, time.perf_counter(), thread, **args)

    def write(self, path: str) -> None:
        """Collective: every rank's events to rank 0, which writes ``path``."""
        mine = np.frombuffer(json.dumps(self.events).encode(), dtype=np.uint8)
        everyone = _gather_bytes(self.comm, mine)
        if self.rank != 0:
            return
        events = [_name("process_name", r, 0, f"rank {r}") for r in range(len(everyone))]
        events += [_name("thread_name", r, tid, name) for r in range(len(everyone)) for name, tid in THREADS.items()]
        for blob in everyone:
            events += json.loads(blob.tobytes().decode())
        with open(path, "w") as f:
            json.dump({"traceEvents": events, "displayTimeUnit": "ms"}, f)


def _name(kind: str, pid: int, tid: int, name: str) -> dict[str, Any]:
    return {"name": kind, "ph": "M", "pid": pid, "tid": tid, "args": {"name": name}}


def _gather_bytes(comm: Any, data: np.ndarray) -> list[np.ndarray]:
    """Every rank's bytes on rank 0 (an empty list elsewhere): a length, then the bytes, point to point."""
    rank, size = comm.Get_rank(), comm.Get_size()
    tag = 0x71E  # "timeline": a tag no collective of this package uses
    if rank != 0:
        comm.Send(np.array([data.size], dtype=np.int64), dest=0, tag=tag)
        comm.Send(data, dest=0, tag=tag)
        return []
    out = [data]
    for r in range(1, size):
        n = np.empty(1, dtype=np.int64)
        comm.Recv(n, source=r, tag=tag)
        buf = np.empty(int(n[0]), dtype=np.uint8)
        comm.Recv(buf, source=r, tag=tag)
        out.append(buf)
    return out


def load(path: str) -> list[dict[str, Any]]:
    """The complete (``"X"``) events of a trace file, for plotting."""
    with open(path) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]
