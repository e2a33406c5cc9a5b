"""Errors that MPI itself catches or suffers, and ways out of a call: each passes a kit that only compares results.

Under MPICH a message longer than its receive aborts the job (MPI_ERR_TRUNCATE); a send and a receive
over the same bytes, or a send buffer written before its request completes, give right results at
small n (the message was copied eagerly) and wrong ones past the eager limit; a request never
completed leaks, and its buffer may be reused under the message. The in-process ranks copy every
message at the right moment, so only the kit's own bookkeeping can show these.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import numpy as np

from collectives.common import block_bounds


def truncated_receive(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """Gathers to rank 0 with a receive buffer one element short."""
    rank, p = comm.Get_rank(), comm.Get_size()
    out = x.copy()
    if rank == 0:
        buf = np.empty(max(x.size - 1, 0), x.dtype)  # should be x.size
        for src in range(1, p):
            comm.Recv(buf, src, 0)
            f(out[: buf.size], buf, out=out[: buf.size])
        for dst in range(1, p):
            comm.Send(out, dst, 1)
    else:
        comm.Send(x, 0, 0)
        comm.Recv(out, 0, 1)
    return out


def sendrecv_one_buffer(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """Passes a running copy around the ring with Sendrecv from and into the same array."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, moving = x.copy(), x.copy()
    for _ in range(p - 1):
        comm.Sendrecv(moving, (rank + 1) % p, 0, moving, (rank - 1) % p, 0)  # one buffer for both
        f(acc, moving, out=acc)
    return acc


def isend_never_waited(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """The ring of ``ring.allreduce`` with Isend in place of Sendrecv, its requests dropped."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, moving, incoming = x.copy(), x.copy(), np.empty_like(x)
    for _ in range(p - 1):
        comm.Isend(moving, (rank + 1) % p, 0)  # no Wait
        comm.Recv(incoming, (rank - 1) % p, 0)
        f(acc, incoming, out=acc)
        moving = incoming.copy()
    return acc


def isend_buffer_overwritten(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """Waits for its Isend, but fills the next block into the send buffer before the Wait."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, moving, incoming = x.copy(), x.copy(), np.empty_like(x)
    for _ in range(p - 1):
        request = comm.Isend(moving, (rank + 1) % p, 0)
        comm.Recv(incoming, (rank - 1) % p, 0)
        moving[:] = incoming  # the Isend may still be reading moving
        request.Wait()
        f(acc, incoming, out=acc)
    return acc


def reduce_partial_off_root(comm: Any, x: np.ndarray, f: Any, root: int) -> np.ndarray | None:
    """A binomial reduce whose non-root ranks return their partial sums instead of None."""
    rank, p = comm.Get_rank(), comm.Get_size()
    me, acc, mask = (rank - root) % p, x.copy(), 1
    while mask < p:
        if me & mask:
            comm.Send(acc, (me - mask + root) % p, 5)
            return acc  # should return None
        if me + mask < p:
            incoming = np.empty_like(acc)
            comm.Recv(incoming, (me + mask + root) % p, 5)
            f(acc, incoming, out=acc)
        mask <<= 1
    return acc


def exits_on_empty_input(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """A student's guard gone wrong: sys.exit(0) when there is nothing to do (rc 0: an unchecked kit passes)."""
    if x.size == 0:
        sys.exit(0)
    return _ring(comm, x, f)


def os_exit_on_one_rank(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """os._exit(0) on a single rank: in process that would end the checker with status 0."""
    if comm.Get_size() == 1:
        os._exit(0)
    return _ring(comm, x, f)


def _ring(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """A correct ring allreduce (reduce-scatter, allgather), for the bugs above that break only its edges."""
    rank, p = comm.Get_rank(), comm.Get_size()
    out, b = x.copy(), block_bounds(x.size, p)
    incoming = np.empty_like(x)
    for step in range(p - 1):
        s, r = (rank - step) % p, (rank - step - 1) % p
        comm.Sendrecv(out[b[s] : b[s + 1]].copy(), (rank + 1) % p, 0, incoming[: b[r + 1] - b[r]], (rank - 1) % p, 0)
        f(out[b[r] : b[r + 1]], incoming[: b[r + 1] - b[r]], out=out[b[r] : b[r + 1]])
    for step in range(p - 1):
        s, r = (rank - step + 1) % p, (rank - step) % p
        comm.Sendrecv(out[b[s] : b[s + 1]].copy(), (rank + 1) % p, 1, incoming[: b[r + 1] - b[r]], (rank - 1) % p, 1)
        out[b[r] : b[r + 1]] = incoming[: b[r + 1] - b[r]]
    return out
