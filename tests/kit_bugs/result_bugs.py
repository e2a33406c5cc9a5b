"""Allreduce bugs in what comes back: the right numbers in the wrong array, or on the wrong ranks.

The kit's allreduce signature: ``fn(comm, x, f)`` returns a NEW flat array of x's shape and dtype
holding f over every rank's x, on every rank. Each function below is right except for the one
mistake its docstring names.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import recursive_doubling, ring
from collectives.common import TAG_BCAST, TAG_GATHER, Op
from kit_bugs.doubling_bugs import everyone_rows

CHUNK = 4096  # elements per piece of empty_vector_broken


def view_of_input(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A result that is a view of the input: at p = 1 "there is nothing to reduce", so x itself is returned.

    The numbers are right, but the caller's result and input are one array: writing to the result
    (scaling a gradient, zeroing a buffer) silently changes the input.
    """
    if comm.Get_size() == 1:
        return x
    return recursive_doubling.allreduce(comm, x, f)


def wrong_dtype(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """The wrong dtype returned: floats are reduced in float64 "for accuracy" and not cast back.

    float16, float32 (and complex64 stays complex64, integers keep theirs): the values are as good or
    better, but a float32 gradient comes back as float64, doubling its memory and changing every
    later operation's dtype.
    """
    if x.dtype.kind == "f":
        x = x.astype(np.float64)
    return ring.allreduce(comm, x, f)


def right_only_on_rank0(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """A result right only on rank 0: the naive allreduce's gather without its broadcast back.

    Rank 0 reduces everyone's vectors in rank order and returns the result; the others return the
    zeros they allocated (the student tested by printing rank 0's output).
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    acc = np.zeros_like(x)
    if rank != 0:
        comm.Send(x, 0, TAG_GATHER)
        return acc
    acc[...] = x
    tmp = np.empty_like(x)
    for src in range(1, p):
        comm.Recv(tmp, src, TAG_GATHER)
        f(acc, tmp, out=acc)
    return acc


def output_2d(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """An allreduce whose output is 2-D: every rank's vector gathered as a (p, n) table, then reduced
    row by row into ``rows[:1]`` (a 1 x n slice) where ``rows[0]`` was meant.

    The values are right; the shape is (1, n), not (n,), so ``out + x`` broadcasts to (1, n) and
    indexing ``out[i]`` takes a whole row.
    """
    rows = everyone_rows(comm, x)
    out = rows[:1].copy()
    for r in range(1, comm.Get_size()):
        f(out, rows[r : r + 1], out=out)
    return out


def empty_vector_broken(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Broken on an empty vector: the vector is reduced in pieces of 4096 elements and the pieces
    joined with np.concatenate, which raises on an empty list (n = 0 gives no piece at all).
    """
    pieces = [ring.allreduce(comm, x[i : i + CHUNK], f) for i in range(0, x.size, CHUNK)]
    return np.concatenate(pieces)


def broken_at_one_rank(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Broken at p = 1: the naive allreduce whose root forms the result while receiving, so with no
    one to receive from, the result is never formed and the root returns the zeros it allocated.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    acc = np.zeros_like(x)
    if rank == 0:
        tmp = np.empty_like(x)
        for src in range(1, p):  # acc = ((x0 op x1) op x2) ...
            comm.Recv(tmp, src, TAG_GATHER)
            f(x if src == 1 else acc, tmp, out=acc)
        for dest in range(1, p):
            comm.Send(acc, dest, TAG_BCAST)
    else:
        comm.Send(x, 0, TAG_GATHER)
        comm.Recv(acc, 0, TAG_BCAST)
    return acc


def inplace_rebinds_name(comm: Any, buf: np.ndarray, f: Op) -> None:
    """The in-place form that never writes its buffer: ``buf = ring.allreduce(...)`` rebinds the local
    name to a new array and the caller's buf keeps its own values (``buf[...] = ...`` was meant).

    Checked as allreduce with inplace=True (``fn(comm, buf, f)``, the result in buf). Right at p = 1.
    """
    buf = ring.allreduce(comm, buf, f)  # noqa: F841 (the bug: the caller never sees this array)
