"""Bugs that one call on fresh ranks does not show by itself: the order messages happen to arrive in,
and state kept from one call to the next.

Signatures: gather ``fn(comm, x, root)`` returns every rank's x end to end on the root (None
elsewhere); allreduce ``fn(comm, x, f)`` returns a new array. Each is right except for the mistake
its docstring names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import ring
from collectives.common import TAG_GATHER, Op
from collectives.inprocess import ANY_SOURCE

_RESULTS: dict[tuple[int, int, str], np.ndarray] = {}  # result_buffer_reused's cache


def gather_any_source(comm: Any, x: np.ndarray, root: int) -> np.ndarray | None:
    """A race: the root receives with ANY_SOURCE and stores the k-th message to arrive as the block of
    the k-th rank, as if messages arrived in rank order.

    Often they do (the ranks start in order, and a short message is quick), so it passes most runs
    on a small machine; under load, or when one rank starts late, blocks land in the wrong places.
    """
    rank, p, n = comm.Get_rank(), comm.Get_size(), x.size
    if rank != root:
        comm.Send(x, root, TAG_GATHER)
        return None
    out = np.empty(p * n, x.dtype)
    out[root * n : (root + 1) * n] = x
    for k in [s for s in range(p) if s != root]:
        comm.Recv(out[k * n : (k + 1) * n], ANY_SOURCE, TAG_GATHER)
    return out


def result_buffer_reused(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """State kept between calls: the result goes into a buffer cached per communicator, size and dtype
    ("no allocation per step", as in a training loop), and that buffer is returned.

    Every single call is right; the next call of the same size on the same communicator overwrites
    the result the caller still holds (last step's gradient, say) with its own.
    """
    key = (id(comm), x.size, x.dtype.str)
    out = _RESULTS.setdefault(key, np.empty_like(x))
    out[...] = ring.allreduce(comm, x, f)
    return out
