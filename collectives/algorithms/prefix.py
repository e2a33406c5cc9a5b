"""Scan and exscan: rank r gets x_0 op x_1 op ... op x_r (inclusive) or ... op x_(r-1) (exclusive).

Recursive doubling on prefixes (MPICH's MPIR_Scan_generic): in round k rank r exchanges with
r XOR 2^k (when it exists) the reduction of its aligned group of 2^k ranks ("partial"). Both
partners fold the other's partial into their own, lower ranks' operand first, so partial becomes
the reduction of the group of 2^(k+1); the upper partner also folds it into its result, since
every rank of the lower group comes before it. Any p: a partner past p - 1 is skipped.

Cost, p ranks, n bytes, L = ceil(log2 p):
    L alpha + L n beta + up to 2 L n gamma       (the upper partner of a pair reduces twice)
against p - 1 rounds for the obvious chain 0 -> 1 -> ... -> p - 1.

Worked example, p = 4, inclusive:
    round 1  0<->1, 2<->3   partials x0+x1 (on 0, 1), x2+x3 (on 2, 3); results x0, x0+x1, x2, x2+x3
    round 2  0<->2, 1<->3   2 and 3 receive x0+x1: results x0, x0+x1, x0+x1+x2, x0+x1+x2+x3
Exscan is the same with no x_r in the result: rank 0 gets nothing (None here; MPI leaves it
undefined). Schedules on flat arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.common import TAG_SCAN, Op


def scan(comm: Any, x: np.ndarray, f: Op = np.add, inclusive: bool = True) -> np.ndarray | None:
    """f over ranks 0..r (inclusive) or 0..r-1 (exclusive; None on rank 0) of the flat x, on rank r."""
    rank, p = comm.Get_rank(), comm.Get_size()
    partial = x.copy()
    result = x.copy() if inclusive else None
    theirs = np.empty_like(x)
    mask = 1
    while mask < p:
        peer = rank ^ mask
        if peer < p:
            comm.Sendrecv(partial, peer, TAG_SCAN, theirs, peer, TAG_SCAN)
            if peer < rank:  # every rank of the peer's group comes before this one
                result = theirs.copy() if result is None else f(theirs, result, out=result)
                f(theirs, partial, out=partial)
            else:
                f(partial, theirs, out=partial)
        mask <<= 1
    return result
