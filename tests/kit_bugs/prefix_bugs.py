"""Scan and exscan bugs (collectives/algorithms/prefix.py): which ranks a prefix covers.

Signatures: scan ``fn(comm, x, f)`` returns f over ranks 0..r on rank r; exscan ``fn(comm, x, f)``
returns f over ranks 0..r-1 (rank 0: None). Both are written on one chain of ranks, the obvious
algorithm (p - 1 steps), with one mistake each.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.common import TAG_SCAN, Op


def _chain(comm: Any, x: np.ndarray, f: Op, reverse: bool = False) -> tuple[np.ndarray | None, np.ndarray]:
    """(before, through) on this rank for a chain 0 -> 1 -> ... -> p-1 (p-1 -> ... -> 0 with ``reverse``):
    ``before`` is f over the ranks ahead of this one in the chain (None on the first), ``through``
    the same with this rank's x folded in (chain order: earlier ranks' operand first)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    prev, nxt = (rank + 1, rank - 1) if reverse else (rank - 1, rank + 1)
    before, through = None, x.copy()
    if 0 <= prev < p:
        before = np.empty_like(x)
        comm.Recv(before, prev, TAG_SCAN)
        f(before, x, out=through)
    if 0 <= nxt < p:
        comm.Send(through, nxt, TAG_SCAN)
    return before, through


def exscan_includes_own(comm: Any, x: np.ndarray, f: Op) -> np.ndarray | None:
    """Exscan including its own contribution: rank r returns what it passes on (ranks 0..r), not what
    it received (ranks 0..r-1). Rank 0 rightly returns None, so p = 1 passes.
    """
    _, through = _chain(comm, x, f)
    return through if comm.Get_rank() > 0 else None


def scan_reversed(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Scan in reverse order: the chain runs from the last rank down, so rank r returns f over ranks
    r..p-1 (a suffix) instead of 0..r: rank 0 holds the total that belongs on rank p - 1. Right only
    at p = 1.
    """
    return _chain(comm, x, f, reverse=True)[1]
