"""The v-collectives: every rank brings its own number of elements (MPI's Allgatherv, Gatherv, Scatterv, Alltoallv).

Arrays are flattened; ranks must agree on the dtype, and a rank learns the others'
counts from the agreement check itself: its handshake (agreement.py) carries each rank's count as
a one-hot vector (c_r in slot r, zeros elsewhere) summed over the ranks, so every rank has every
count after log2 p' + 2d rounds of 104 + 8 p bytes, the rounds the check costs anyway. Alltoallv
carries the p x p matrix of counts the same way (while 8 p^2 bytes fit in INLINE, p <= 45; past
that a recursive-doubling allreduce of the counts follows the check). Counts that make no sense on
one rank (negative, the wrong number, a wrong total) travel as -1s, so every rank raises the error. Then the schedules:

    allgatherv   ring.allgather_into with blocks of the given sizes:  (p - 1) alpha + (n - c_r) beta
    gatherv      naive.gatherv (linear to the root):                  (p - 1) alpha + (n - c_root) beta
    scatterv     naive.scatterv (linear from the root):               (p - 1) alpha + (n - c_root) beta
    alltoallv    exchange.pairwise with blocks of the given sizes:    (p - 1) alpha + (sent - own) beta

Each returns the flat result and the counts it was cut by, so ``np.split(out, np.cumsum(counts)[:-1])``
gives every rank's part.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.agreement import (
    INLINE,
    MismatchError,
    agree_with_root,
    as_native_array,
    check_root,
    check_sendable,
    handshake,
    header_bytes,
    raise_unless_agreed,
    root_code,
)
from collectives.algorithms import naive, recursive_doubling, ring
from collectives.algorithms.exchange import pairwise
from collectives.common import bounds_of
from collectives.watch import watched
from collectives.wire_format import wire


def _counts_in_handshake(comm: Any, dtype: np.dtype, call: str, mine: np.ndarray) -> np.ndarray:
    """Check that every rank calls ``call`` with this dtype; return the sum over ranks of ``mine`` (int64)."""
    head = header_bytes(None, dtype, "", call)
    if comm.Get_size() == 1:
        total = mine
    elif mine.nbytes <= INLINE:
        total, agreed = handshake(comm, head, mine, np.add)
        raise_unless_agreed(comm, head, agreed)
    else:
        raise_unless_agreed(comm, head, handshake(comm, head)[1])
        total = recursive_doubling.allreduce(comm, mine, np.add)
    check_sendable(dtype, call)  # the dtypes agree: every rank raises it alike
    return total


def _bad_counts(counts: Any, p: int, n: int) -> bool:
    """Are ``counts`` anything but p non-negative integers adding up to n?"""
    try:
        c = np.array(counts, dtype=np.int64).reshape(-1)
    except (TypeError, ValueError):
        return True
    return c.size != p or bool((c < 0).any()) or int(c.sum()) != n


@watched
def allgatherv(comm: Any, x: Any) -> tuple[np.ndarray, list[int]]:
    """Every rank's ``x`` (flattened; sizes may differ, one dtype) end to end on every rank, and the counts."""
    x = as_native_array(x).reshape(-1)
    rank, p = comm.Get_rank(), comm.Get_size()
    onehot = np.zeros(p, np.int64)
    onehot[rank] = x.size
    counts = _counts_in_handshake(comm, x.dtype, "allgatherv", onehot).tolist()
    b = bounds_of(counts)
    out = np.empty(b[p], x.dtype)
    out[b[rank] : b[rank + 1]] = x
    ring.allgather_into(wire(comm, x.dtype), out, b)
    return out, counts


@watched
def gatherv(comm: Any, x: Any, root: int = 0) -> tuple[np.ndarray | None, list[int]]:
    """Every rank's ``x`` (flattened) end to end on the root (None elsewhere), and the counts (on every rank)."""
    x = as_native_array(x).reshape(-1)
    rank, p = comm.Get_rank(), comm.Get_size()
    onehot = np.zeros(p + 1, np.int64)
    onehot[rank], onehot[p] = x.size, root_code(root)  # adds up to p * root if every rank names the same root
    total = _counts_in_handshake(comm, x.dtype, "gatherv", onehot)
    if total[p] != p * root_code(root):
        raise MismatchError("gatherv: ranks disagree on the root (every rank raises this error)")
    check_root(root, "gatherv", p)
    counts = total[:p].tolist()
    return naive.gatherv(wire(comm, x.dtype), x, bounds_of(counts), root), counts


@watched
def scatterv(comm: Any, x: Any, counts: Any = None, root: int = 0) -> np.ndarray:
    """The root's ``x`` (flattened) cut by ``counts`` (p sizes, needed on the root only): part r on rank r."""
    rank, p = comm.Get_rank(), comm.Get_size()
    mine = np.zeros(p, np.int64)
    if rank == root:
        x = as_native_array(x).reshape(-1)
        mine[:] = -1 if _bad_counts(counts, p, x.size) else np.array(counts, np.int64).reshape(-1)
    _, dtype = agree_with_root(comm, x if rank == root else None, "scatterv", root, same_as_root=False)
    total = _counts_in_handshake(comm, dtype, "scatterv.counts", mine)
    if (total < 0).any():
        raise ValueError(
            f"scatterv: the root (rank {root}) passed counts that are not {p} non-negative integers adding up "
            "to its array's size (every rank raises this error)"
        )
    out = np.empty(int(total[rank]), dtype)
    naive.scatterv(wire(comm, dtype), x if rank == root else None, out, bounds_of(total.tolist()), root)
    return out


@watched
def alltoallv(comm: Any, x: Any, counts: Any) -> tuple[np.ndarray, list[int]]:
    """The ``x`` (flattened) cut by ``counts`` (p sizes, this rank's own): part j to rank j.

    Returns what this rank received, end to end in rank order, and the receive counts.
    """
    x = as_native_array(x).reshape(-1)
    rank, p = comm.Get_rank(), comm.Get_size()
    matrix = np.zeros((p, p), np.int64)
    bad = _bad_counts(counts, p, x.size)
    matrix[rank] = -1 if bad else np.array(counts, np.int64).reshape(-1)
    total = _counts_in_handshake(comm, x.dtype, "alltoallv", matrix.reshape(-1)).reshape(p, p)
    wrong = [r for r in range(p) if (total[r] < 0).all()]
    if wrong:
        raise ValueError(
            f"alltoallv: ranks {wrong} passed counts that are not {p} non-negative integers adding up to their "
            "array's size (every rank raises this error)"
        )
    received = total[:, rank].tolist()  # what each rank sends to this one
    return pairwise(wire(comm, x.dtype), x, bounds_of(total[rank].tolist()), bounds_of(received)), received
