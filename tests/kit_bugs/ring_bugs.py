"""Allreduce bugs made from the ring (collectives/algorithms/ring.py): each function is ring.allreduce with one mistake.

The kit's allreduce signature: ``fn(comm, x, f)`` returns a new flat array holding f over every
rank's flat ``x``; x is read only. Every function here is right except for the one mistake its
docstring names (tests/test_kit_catalogue.py checks that the kit finds each).
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from collectives import recursive_doubling, ring
from collectives.common import TAG_ALLGATHER, TAG_REDUCE_SCATTER, Op, block_bounds

SEGMENT = 8192  # elements per segment of tail_segment_lost's pipelined ring
SHORT, LONG = 1024, 8192  # medium_range_broken's algorithm switch, in elements
NARROW = {np.dtype(np.float64): np.float32, np.dtype(np.int64): np.int32, np.dtype(np.complex128): np.complex64}


def remainder_dropped(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Remainder block dropped when p does not divide n.

    The blocks are n // p elements each (``b = [r * q ...]``), so they end at p * (n // p): the last
    n % p elements are never sent and keep this rank's own values. Right whenever p divides n.
    """
    p = comm.Get_size()
    q = x.size // p
    b = [r * q for r in range(p + 1)]
    acc = x.copy()
    ring.reduce_scatter_into(comm, x, acc, f, b)
    ring.allgather_into(comm, acc, b)
    return acc


def allgather_one_step_short(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A phase one step short: the allgather runs p - 2 steps instead of p - 1.

    The block that should arrive in the last step (the right neighbour's, r + 1) is never received,
    so every rank keeps its partial sum of that block from the reduce-scatter (or zeros at p = 2).
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    b = block_bounds(x.size, p)
    acc = np.zeros_like(x)
    ring.reduce_scatter_into(comm, x, acc, f, b)
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 2):
        send, recv = (rank - s) % p, (rank - s - 1) % p
        comm.Sendrecv(acc[b[send] : b[send + 1]], right, TAG_ALLGATHER, acc[b[recv] : b[recv + 1]], left, TAG_ALLGATHER)
    return acc


def op_ignored(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """The op ignored (always adds): f is not passed on, and ring.allreduce's default is np.add.

    Right for sums; max, min, prod and the logical ops come back as sums (for bools np.add is a
    logical or, so max is right and min is not).
    """
    return ring.allreduce(comm, x)


def _ring_in_place(comm: Any, buf: np.ndarray, f: Op) -> None:
    """A ring allreduce in place in ``buf`` (the student's own, correct on its own buffer)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    b = block_bounds(buf.size, p)
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 1):
        send, recv = (rank - s - 1) % p, (rank - s - 2) % p
        got = np.empty(b[recv + 1] - b[recv], buf.dtype)
        comm.Sendrecv(buf[b[send] : b[send + 1]], right, TAG_REDUCE_SCATTER, got, left, TAG_REDUCE_SCATTER)
        f(got, buf[b[recv] : b[recv + 1]], out=buf[b[recv] : b[recv + 1]])
    ring.allgather_into(comm, buf, b)


def input_mutated(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """The caller's input mutated: the in-place ring runs on x itself, then a copy is returned.

    The result is right on every rank; x now holds it too, so a caller that reuses x (a gradient it
    still needs, the next step's input) reads the sum instead. Harmless only at p = 1.
    """
    _ring_in_place(comm, x, f)
    return x.copy()


def narrow_accumulation(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Accumulation in a narrower dtype: float64 summed in float32 (int64 in int32, complex128 in complex64).

    "Half the bytes on the wire" is tempting, but float32 keeps 24 bits of a 53-bit mantissa (an
    error of about 1e-7 relative, against float64's 1e-16) and int32 wraps int64 values. The result
    is cast back, so its dtype looks right. Wrong even at p = 1, where the round trip alone rounds.
    """
    acc = x.astype(NARROW.get(x.dtype, x.dtype))
    _ring_in_place(comm, acc, f)
    return acc.astype(x.dtype)


def tail_segment_lost(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A tail segment lost above a size threshold: long vectors go in segments of 8192 elements, and
    the loop counts whole segments only (n // SEGMENT, not its ceiling).

    Up to 8192 elements, or any multiple of 8192, the result is right; otherwise the last partial
    segment keeps this rank's own values.
    """
    if x.size <= SEGMENT:
        return ring.allreduce(comm, x, f)
    out = x.copy()
    for k in range(x.size // SEGMENT):
        seg = slice(k * SEGMENT, (k + 1) * SEGMENT)
        out[seg] = ring.allreduce(comm, x[seg], f)
    return out


def medium_range_broken(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A bug in the medium-size algorithm only: as MPICH does, the algorithm is picked by size, recursive
    doubling below 1024 elements, the ring above 8192, and for the sizes between a ring whose blocks
    drop the remainder (remainder_dropped).

    Right for every n < 1024 and n > 8192, and for n in between that p divides.
    """
    if x.size < SHORT:
        return recursive_doubling.allreduce(comm, x, f)
    if x.size > LONG:
        return ring.allreduce(comm, x, f)
    return remainder_dropped(comm, x, f)


class _Wrapped:
    """A communicator passed through, with the student's own Sendrecv (the subclasses')."""

    def __init__(self, comm: Any):
        self.comm = comm

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()


class _SendThenRecv(_Wrapped):
    """The student's stand-in for Sendrecv on a communicator "without it": a Send, then a Recv."""

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int, recvtag: int) -> None:
        self.comm.Send(sendbuf, dest, sendtag)
        self.comm.Recv(recvbuf, source, recvtag)


class _SkipEmptySends(_Wrapped):
    """The student's Sendrecv that saves a message when there is nothing to send (but still receives)."""

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int, recvtag: int) -> None:
        if sendbuf.size == 0:
            self.comm.Recv(recvbuf, source, recvtag)
        else:
            self.comm.Sendrecv(sendbuf, dest, sendtag, recvbuf, source, recvtag)


def send_then_recv(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A deadlock that only synchronous sends reveal: every ring step is Send to the right, then Recv.

    Under an MPI that buffers short messages (eager protocol) every Send returns at once and the
    result is right; with synchronous sends (MPI_Ssend, or any long message) every rank waits in
    its Send for a receive that its neighbour posts only after its own Send: all ranks wait in a
    cycle as soon as p >= 2.
    """
    return ring.allreduce(_SendThenRecv(comm), x, f)


def empty_blocks_skipped(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Broken when n < p: a ring step whose block is empty skips its send, but the neighbour still
    posts the matching receive (of an empty block): it waits forever, or takes the next message,
    a longer block, in its place (MPI_ERR_TRUNCATE).

    Whenever every block has an element (n >= p) nothing is skipped and the result is right.
    """
    return ring.allreduce(_SkipEmptySends(comm), x, f)


class _PollingSendrecv(_Wrapped):
    """The student's overlapped Sendrecv: post both requests, then poll them (work could go in the loop),
    with the receive posted from ``dest``, the peer it sends to, instead of ``source``."""

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int, recvbuf: Any, source: int, recvtag: int) -> None:
        requests = [self.comm.Irecv(recvbuf, dest, recvtag), self.comm.Isend(sendbuf, dest, sendtag)]
        while not all([r.Test() for r in requests]):
            time.sleep(0.001)  # (a polite poll: the loop yields the CPU)


def polls_wrong_peer(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A hang that is not a deadlock: each ring step polls its two requests with Test, and the receive
    names the right neighbour, who never sends to this rank.

    No rank ever blocks in a call, so no deadlock can be detected: only a timeout ends it. At p = 2
    both neighbours are the same rank and the result is right; from p = 3 every rank spins forever.
    """
    return ring.allreduce(_PollingSendrecv(comm), x, f)
