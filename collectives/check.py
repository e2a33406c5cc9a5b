"""Do all ranks call the same collective on the same kind of array? Ask before moving any data.

If rank 0 brings 10 floats and rank 1 brings 12, MPI itself may hang, truncate, or return garbage.
So every public collective starts with a cheap agreement check: each rank describes its call in a
fixed-size header (128 bytes: size, bytes, shape, dtype, op, collective, root), the headers are
allgathered by recursive doubling (pof2.allgather_blocks: log2 p' steps, +2 when p is not a power
of two), and every rank compares the same table. If anything differs, every rank raises the same
``MismatchError`` naming which ranks brought what: an error on every rank, never a hang and never
a wrong answer. Ops and dtypes are validated only after the exchange, so a bad op raises everywhere.

The check costs about log2(p) alpha + (p - 1) * 128 bytes * beta per call, which matters only for
short messages. Recursive doubling, the short-message algorithm, carries the headers along with
its own messages instead (see recursive_doubling.py). Callers that know their ranks agree may pass
``check=False`` to the allreduces.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import numpy as np

from collectives.common import TAG_CHECK, reduction
from collectives.pof2 import allgather_blocks

MAX_DIMS = 4  # dims stored in the header; longer shapes are compared through their checksum
HEADER = np.dtype(
    [
        ("size", "<i8"),
        ("nbytes", "<i8"),  # so that a receiver can size its buffer for the data that follows (pof2 fused check)
        ("ndim", "<i8"),  # -1: this rank passed no array (allowed for non-roots of scatter and broadcast)
        ("shape", "<i8", (MAX_DIMS,)),
        ("shape_crc", "<i8"),
        ("root", "<i8"),
        ("dtype", "S16"),
        ("op", "S8"),
        ("call", "S32"),
    ]
)


class MismatchError(ValueError):
    """Ranks called a collective with different shapes, dtypes, ops, roots or collectives."""


def as_native_array(x: Any) -> np.ndarray:
    """x as a C-contiguous ndarray in native byte order (a view when it already is one)."""
    if type(x) is np.ndarray and x.flags.c_contiguous and x.dtype.isnative:
        return x
    x = np.asarray(x)
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    return x if x.flags.c_contiguous else x.copy(order="C")


def header(x: np.ndarray | None, op: str, call: str, root: int) -> np.ndarray:
    """This rank's 128-byte description of its call: 16 int64 words laid out as HEADER (read only)."""
    return _header(None if x is None else (x.shape, x.dtype), str(op), call, root)


@functools.lru_cache(maxsize=1024)
def _header(array: tuple | None, op: str, call: str, root: int) -> np.ndarray:
    """Cached: the header is built on every collective call's path, and building it costs microseconds."""
    h = np.zeros((), HEADER)
    h["root"], h["op"], h["call"] = root, op.encode()[:8], call.encode()[:32]
    if array is None:
        h["ndim"] = -1
    else:
        shape, dtype = array
        h["size"] = int(np.prod(shape, dtype=np.int64))
        h["nbytes"], h["ndim"], h["dtype"] = h["size"] * dtype.itemsize, len(shape), dtype.str.encode()[:16]
        h["shape"][: min(len(shape), MAX_DIMS)] = shape[:MAX_DIMS]
        h["shape_crc"] = zlib.crc32(np.asarray(shape, dtype="<i8").tobytes())
    return np.frombuffer(h.tobytes(), dtype="<i8")


@functools.lru_cache(maxsize=1024)
def header_bytes(shape: tuple, dtype: np.dtype, op: str, call: str) -> bytes:
    """The header of an array of this shape and dtype as bytes (cached, for recursive doubling's short path)."""
    return _header((shape, dtype), op, call, -1).tobytes()


def exchange_headers(comm: Any, x: np.ndarray | None, op: str, call: str, root: int = -1) -> np.ndarray:
    """The headers of all p ranks, the same table on every rank: p rows of 16 int64 (view as HEADER to read)."""
    p, rank = comm.Get_size(), comm.Get_rank()
    table = np.empty((p, HEADER.itemsize // 8), dtype="<i8")
    table[rank] = header(x, op, call, root)
    allgather_blocks(comm, table.reshape(-1), table.shape[1], tag=TAG_CHECK)
    return table


def describe(h: np.void) -> str:
    if h["ndim"] < 0:
        what = "no array"
    else:
        shape = tuple(int(d) for d in h["shape"][: min(int(h["ndim"]), MAX_DIMS)])
        dims = str(shape) if h["ndim"] <= MAX_DIMS else f"{int(h['ndim'])}-d array of {int(h['size'])} elements"
        try:
            dtype = np.dtype(h["dtype"].decode()).name
        except TypeError:
            dtype = h["dtype"].decode()
        what = f"shape {dims} dtype {dtype}"
    root = f", root {int(h['root'])}" if h["root"] >= 0 else ""
    return f"{h['call'].decode()} with {what}, op {h['op'].decode()!r}{root}"


def raise_mismatch(table: np.ndarray, problem: str) -> None:
    table = table.view(HEADER).reshape(-1)
    groups: dict[bytes, list[int]] = {}
    for rank, h in enumerate(table):
        groups.setdefault(h.tobytes(), []).append(rank)
    lines = [f"ranks {ranks}: {describe(table[ranks[0]])}" for ranks in groups.values()]
    call = table[0]["call"].decode()  # rank 0's, so that every rank's message is the same
    raise MismatchError(f"{call}: {problem} (every rank raises this error):\n  " + "\n  ".join(lines))


def agree(comm: Any, x: Any, op: str | None, call: str, root: int = -1, check: bool = True):
    """Check that every rank brings the same shape, dtype, op and root; return (flat x, op ufunc).

    The flat x is a view of the caller's array (never written), native byte order and contiguous.
    The op is validated after the exchange, so a bad op or dtype raises on every rank alike.
    """
    x = as_native_array(x)
    if check and comm.Get_size() > 1:
        table = exchange_headers(comm, x, op or "", call, root)
        if table.tobytes() != table[:1].tobytes() * len(table):
            raise_mismatch(table, "ranks disagree on their arrays")
    if not 0 <= root < comm.Get_size() and root != -1:
        raise ValueError(f"{call}: root {root} out of range for {comm.Get_size()} ranks")
    f = reduction(op, x.dtype) if op is not None else None
    return x.reshape(-1), f


def agree_with_root(comm: Any, x: Any, call: str, root: int, same_as_root: bool) -> tuple[tuple, np.dtype]:
    """For broadcast and scatter: non-roots may pass None; return the root's shape and dtype.

    With ``same_as_root`` (broadcast), an array a non-root does pass must match the root's;
    without (scatter), whatever non-roots pass is ignored.
    """
    p, rank = comm.Get_size(), comm.Get_rank()
    mine = None if x is None or (rank != root and not same_as_root) else as_native_array(x)
    raw = exchange_headers(comm, mine, "", call, root)
    table = raw.view(HEADER).reshape(p)
    if len({int(r) for r in table["root"]}) > 1:
        raise_mismatch(table, "ranks disagree on the root")
    if not 0 <= root < p:
        raise ValueError(f"{call}: root {root} out of range for {p} ranks")
    ref = table[root]
    if ref["ndim"] < 0:
        raise_mismatch(table, f"the root (rank {root}) passed no array")
    for h in table:
        if h["call"] != ref["call"] or h["root"] != ref["root"] or (h["ndim"] >= 0 and h.tobytes() != ref.tobytes()):
            raise_mismatch(table, "ranks disagree with the root")
    if ref["ndim"] > MAX_DIMS and (table["ndim"] < 0).any():
        raise_mismatch(table, f"a root array of more than {MAX_DIMS} dims needs an array on every rank")
    return tuple(int(d) for d in ref["shape"][: int(ref["ndim"])]), np.dtype(ref["dtype"].decode())
