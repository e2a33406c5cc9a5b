"""Do all ranks call the same collective on the same kind of array? Ask before moving any data.

If rank 0 brings 10 floats and rank 1 brings 12, MPI itself may hang, truncate, or return garbage.
So every public collective starts with a cheap agreement check: each rank describes its call in a
fixed-size header (128 bytes: size, bytes, shape, dtype, op, collective, root), and a handshake
(``handshake``: recursive doubling with the fold of pof2.py, log2 p' steps, +2 when p is not a
power of two) tells every rank whether all headers are equal. Each message is the sender's header
and a flag "my group has seen a header unlike its own"; a receiver raises its own flag when the
peer's flag is up or the peer's header differs from its own, so after the last step every rank
holds the same answer. Only if it is "no" do the ranks exchange the full table of headers
(``exchange_headers``) and raise the same ``MismatchError`` naming which ranks brought what: an
error on every rank, never a hang and never a wrong answer. Ops and dtypes are validated only
after the handshake, so a bad op raises everywhere.

Every collective starts with the same handshake (same partners, same tag, messages of at most
PREFIX + INLINE bytes, which is what every receiver has room for), so ranks that even call
different collectives, or that "auto" sends to different algorithms because their sizes differ,
meet in it and learn of the disagreement. Recursive doubling, the short-message algorithm, makes
the handshake its own first and only pass: its messages carry the data (at most INLINE bytes)
after the header, so a checked short allreduce costs one pass, as an unchecked one does.

The check costs (log2 p' + 2d) (alpha + 144 bytes beta) per call, which matters only for short
messages. Callers that know their ranks agree may pass ``check=False`` to the allreduces.
"""

from __future__ import annotations

import functools
import zlib
from typing import Any

import numpy as np

from collectives.common import TAG_CHECK, TAG_HEADERS, combine, reduction
from collectives.pof2 import allgather_blocks, fold_of

MAX_DIMS = 4  # dims stored in the header; longer shapes are compared through their checksum
HEADER = np.dtype(
    [
        ("size", "<i8"),
        ("nbytes", "<i8"),  # size * itemsize
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


PREFIX = HEADER.itemsize + 16  # a handshake message: the sender's header, a 16-byte status word, then data
INLINE = 16 << 10  # the most data a handshake message may carry (recursive doubling's short vectors)
AGREED = bytes(16)  # status word: every rank the sender stands for has brought the sender's header so far
DIFFERS = b"\x01" + bytes(15)  # status word: some rank the sender has heard from brought another header
NOTHING = np.empty(0, np.uint8)  # the data of a handshake that only checks
NOTHING.flags.writeable = False


def header(x: np.ndarray | None, op: str, call: str, root: int = -1) -> bytes:
    """This rank's 128-byte description of its call, laid out as HEADER."""
    return header_bytes(None if x is None else x.shape, None if x is None else x.dtype, str(op), call, root)


@functools.lru_cache(maxsize=1024)
def header_bytes(shape: tuple | None, dtype: np.dtype | None, op: str, call: str, root: int = -1) -> bytes:
    """The header of an array of this shape and dtype (shape None: no array), cached: every call builds one."""
    h = np.zeros((), HEADER)
    h["root"], h["op"], h["call"] = root, op.encode()[:8], call.encode()[:32]
    if shape is None:
        h["ndim"] = -1
    else:
        h["size"] = int(np.prod(shape, dtype=np.int64))
        h["nbytes"], h["ndim"], h["dtype"] = h["size"] * dtype.itemsize, len(shape), dtype.str.encode()[:16]
        h["shape"][: min(len(shape), MAX_DIMS)] = shape[:MAX_DIMS]
        h["shape_crc"] = zlib.crc32(np.asarray(shape, dtype="<i8").tobytes())
    return h.tobytes()


def handshake(comm: Any, head: bytes, x: np.ndarray = NOTHING, f: np.ufunc | None = None) -> tuple[np.ndarray, bool]:
    """Does every rank bring the header ``head``? The same answer on every rank, with f-allreduce of a short x.

    Recursive doubling with the fold (pof2.py); every message is [head | status | partial result]
    and goes to the same partners, with the same tag, whatever the call. The status word says
    whether the ranks the sender stands for all brought the sender's header (AGREED) or not
    (DIFFERS). A rank that receives DIFFERS or a header unlike its own sends DIFFERS from then on,
    so after the last step every rank knows whether any two ranks differ (the group a rank stands
    for doubles each step and in the end is all ranks; a group all of whose ranks agree has one
    header, its members'). Receive buffers hold PREFIX + INLINE bytes, the most any rank sends, so
    a rank that brings more data than this one expects cannot overflow them.

    While the ranks agree, the partial results are combined as in recursive_doubling.py (operands
    in rank order into a new array, so both partners get the same bits): with a flat ``x`` of at
    most INLINE bytes and its op ``f``, the result is f over every rank's x. With f None only the
    headers are compared (x travels but is not combined). Returns (result, True) or (meaningless,
    False) on every rank; on one rank (p == 1) (x itself, True).
    """
    if x.nbytes > INLINE:
        raise ValueError(f"handshake: {x.nbytes} bytes of data, more than INLINE = {INLINE} (the receivers' room)")
    rank = comm.Get_rank()
    fold = fold_of(rank, comm.Get_size())
    expected = head + AGREED  # how a message from ranks that agree with this one starts
    room = np.empty(PREFIX + INLINE, np.uint8)
    mine, agreed = x, True
    if fold.extra and fold.newrank < 0:  # fold in: even rank 2i hands x to 2i+1 and waits for the answer
        comm.Send(b"".join((expected, x)), rank + 1, TAG_CHECK)
        comm.Recv(room, rank + 1, TAG_CHECK)
        agreed = room[:PREFIX].tobytes() == expected
        if agreed and f is not None:
            mine = np.frombuffer(room, x.dtype, x.size, PREFIX).copy()  # a result of its own, not a view of room
        return mine, agreed
    if fold.extra:
        comm.Recv(room, rank - 1, TAG_CHECK)
        mine, agreed = _merge(room, expected, mine, f, lower=True)
    for peer in fold.doubling_peers:
        comm.Sendrecv(b"".join((head, AGREED if agreed else DIFFERS, mine)), peer, TAG_CHECK, room, peer, TAG_CHECK)
        if agreed:
            mine, agreed = _merge(room, expected, mine, f, lower=peer < rank)
    if fold.extra:  # fold out: 2i+1 hands the answer (and result) back to 2i
        comm.Send(b"".join((head, AGREED if agreed else DIFFERS, mine)), rank - 1, TAG_CHECK)
    return mine, agreed


def _merge(
    room: np.ndarray, expected: bytes, mine: np.ndarray, f: np.ufunc | None, lower: bool
) -> tuple[np.ndarray, bool]:
    """One received handshake message: (f of the two partial results, True) if the sender agrees, else (mine, False)."""
    if room[:PREFIX].tobytes() != expected:
        return mine, False
    if f is None:
        return mine, True
    return combine(f, mine, np.frombuffer(room, mine.dtype, mine.size, PREFIX), theirs_is_lower=lower), True


def raise_unless_agreed(comm: Any, head: bytes, agreed: bool) -> None:
    """After a handshake (whose answer every rank shares): if it failed, gather every header and raise on every rank."""
    if not agreed:
        table = exchange_headers(comm, head)
        raise_mismatch(table, disagreement(table))


def exchange_headers(comm: Any, head: bytes) -> np.ndarray:
    """The headers of all p ranks, the same table on every rank: p rows of 16 int64 (view as HEADER to read).

    A recursive-doubling allgather (pof2.allgather_blocks): (log2 p' + 2d) alpha + about p 128 bytes beta.
    """
    p, rank = comm.Get_size(), comm.Get_rank()
    table = np.empty((p, HEADER.itemsize // 8), dtype="<i8")
    table[rank] = np.frombuffer(head, "<i8")
    allgather_blocks(comm, table.reshape(-1), table.shape[1], tag=TAG_HEADERS)
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


def disagreement(table: np.ndarray) -> str:
    """What a table of headers disagrees on, first the collective, then the root, else the arrays (or op)."""
    rows = table.view(HEADER).reshape(-1)
    if len(set(rows["call"].tolist())) > 1:
        return "ranks called different collectives (or algorithms)"
    if len(set(rows["root"].tolist())) > 1:
        return "ranks disagree on the root"
    return "ranks disagree on their arrays"


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
    The op is validated after the handshake, so a bad op or dtype raises on every rank alike.
    """
    x = as_native_array(x)
    if check and comm.Get_size() > 1:
        head = header(x, op or "", call, root)
        raise_unless_agreed(comm, head, handshake(comm, head)[1])
    if not 0 <= root < comm.Get_size() and root != -1:
        raise ValueError(f"{call}: root {root} out of range for {comm.Get_size()} ranks")
    f = reduction(op, x.dtype) if op is not None else None
    return x.reshape(-1), f


def agree_with_root(comm: Any, x: Any, call: str, root: int, same_as_root: bool) -> tuple[tuple, np.dtype]:
    """For broadcast and scatter: non-roots may pass None; return the root's shape and dtype.

    With ``same_as_root`` (broadcast), an array a non-root does pass must match the root's;
    without (scatter), whatever non-roots pass is ignored. The handshake compares only the call and
    the root (headers without an array); then every rank needs the table of headers anyway, for
    the root's shape.
    """
    p, rank = comm.Get_size(), comm.Get_rank()
    _, agreed = handshake(comm, header(None, "", call, root))
    mine = None if x is None or (rank != root and not same_as_root) else as_native_array(x)
    table = exchange_headers(comm, header(mine, "", call, root)).view(HEADER).reshape(p)
    if not agreed:  # on a rank of any collective whose handshake failed: the same message
        raise_mismatch(table, disagreement(table))
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
