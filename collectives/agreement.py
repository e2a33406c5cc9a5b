"""Do all ranks call the same collective on the same kind of array? Ask before moving any data.

If rank 0 brings 10 floats and rank 1 brings 12, MPI itself may hang, truncate, or return garbage.
So every public collective starts with a cheap agreement check: each rank describes its call in a
header (88 bytes: size, bytes, ndim, root, dtype, op, collective; then the full shape, 8 bytes a
dimension, whatever the number of dimensions), and a handshake (``handshake``: recursive doubling
with the fold of fold.py, log2 p' steps, +2 when p is not a power of two) tells every rank whether
all headers are equal. Each message is the sender's header and a flag "my group has seen a header
unlike its own"; a receiver raises its own flag when the peer's flag is up or the peer's header
differs from its own, so after the last step every rank holds the same answer. Only if it is "no"
do the ranks exchange the full table of headers (``exchange_headers``) and raise the same
``MismatchError`` naming which ranks brought what: an error on every rank, never a hang and never
a wrong answer. Ops and dtypes are validated only after the handshake, so a bad op raises
everywhere.

Every collective starts with the same handshake (same partners, same tag, messages of at most
ROOM bytes, which is what every receiver has room for), so ranks that even call different
collectives, or that "auto" sends to different algorithms because their sizes differ, meet in it
and learn of the disagreement.

The check is applied by dispatch.py, as a wrapper (``checked_reduction``, ``agree``): every
algorithm file is only the schedule, run on a flat array whose agreement is already known.

A lesson in saving a latency-bound round
----------------------------------------
For a short vector an allreduce costs rounds, not bytes: at 1 KiB, p = 2, one message is some
microseconds of latency and 1 KiB is a fraction of one. A check before it would double the time.
But the handshake *is* a recursive doubling over the same partners as recursive_doubling.py's
allreduce, so its messages can carry the data too: [header | status | partial result], the
partial results combined exactly as the allreduce would combine them (operands in rank order),
and the data of a rank whose header differs never combined. After log2 p' rounds every rank knows
both that all agreed and the result: a checked short allreduce costs one pass, as an unchecked
one does (``checked_reduction(..., carries_short=True)``, for vectors of at most INLINE bytes).
The same idea checks the v-collectives' counts (``agree_on_counts``): the handshake carries each
rank's [counts, -counts] reduced by max, which gives every rank max(counts) and -min(counts) at no
extra round; they are equal everywhere only if every rank brought the same counts.

A rank that skips the check (``check=False`` on that rank alone) goes straight to the schedule, and the
others wait in the handshake for a message it will never send. A wait cannot tell a late partner from a
missing one, but on MPI's own communicator the handshake's waits are polled (``exchange``,
``wait_in_check``): after STALL seconds a rank looks for a message of a collective's schedule sent to it
(any collectives tag but the check's) and, if one is there, names its sender in one line.

Cost: (log2 p' + 2d) (alpha + (104 + 8 ndim) bytes beta) per call, which matters only for short
messages. Callers that know their ranks agree may pass ``check=False`` to the allreduces.
"""

from __future__ import annotations

import functools
import operator
import sys
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from collectives.algorithms.fold import allgather_blocks, fold_of
from collectives.common import TAG_CHECK, TAG_COUNTS, TAG_HEADERS, Op, combine, reduction

FIXED = np.dtype(
    [
        ("size", "<i8"),
        ("nbytes", "<i8"),  # size * itemsize
        ("ndim", "<i8"),  # -1: no array (non-roots of scatter, broadcast); -2: a 1-d array of any size
        ("root", "<i8"),
        ("dtype", "S16"),
        ("op", "S8"),
        ("call", "S32"),
    ]
)  # then ndim int64 dimensions: the header compares full shapes, with no checksum to collide
MAX_DIMS = 64  # NumPy's limit on dimensions
ROW = FIXED.itemsize + 8 * MAX_DIMS  # the longest header, a row of the table of headers
STATUS = 16  # bytes of the status word after the header
INLINE = 16 << 10  # the most data a handshake message may carry (short vectors, counts)
ROOM = ROW + STATUS + INLINE  # every receiver's room: the longest handshake message
AGREED = bytes(STATUS)  # status word: every rank the sender stands for has brought the sender's header so far
DIFFERS = b"\x01" + bytes(STATUS - 1)  # status word: some rank the sender has heard from brought another header
NOTHING = np.empty(0, np.uint8)  # the data of a handshake that only checks
NOTHING.flags.writeable = False


class MismatchError(ValueError):
    """Ranks called a collective with different shapes, dtypes, ops, roots, counts or collectives.

    Made on every rank of a failed agreement, wherever it is raised; making one calls each of ``ON_MISMATCH``
    (minidl's lockstep forgets the end of run it would agree on at exit: a rank that catches this error and
    returns would otherwise wait there for partners that have gone).
    """

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        for hook in ON_MISMATCH:
            hook()


# Called whenever a MismatchError is made (a library above the collectives: "this run has failed here").
ON_MISMATCH: list[Callable[[], None]] = []


def as_native_array(x: Any) -> np.ndarray:
    """x as a C-contiguous ndarray in native byte order (a view when it already is one)."""
    if type(x) is np.ndarray and x.flags.c_contiguous and x.dtype.isnative:
        return x
    x = np.asarray(x)
    if not x.dtype.isnative:
        x = x.astype(x.dtype.newbyteorder("="))
    return x if x.flags.c_contiguous else x.copy(order="C")


def dtype_code(dtype: np.dtype) -> str:
    """A short name of a dtype that tells apart what dtype.str does not: (value, index) pairs by field types."""
    if dtype.names is None:
        return dtype.str
    fields = ",".join(dtype[name].str for name in dtype.names)
    return f"({fields})" + ("a" if dtype.isalignedstruct else "")  # a: laid out as a C struct


def header(x: np.ndarray | None, op: str, call: str, root: int = -1) -> bytes:
    """This rank's description of its call: FIXED, then the shape."""
    return header_bytes(None if x is None else x.shape, None if x is None else x.dtype, str(op), call, root)


@functools.lru_cache(maxsize=1024)
def header_bytes(shape: tuple | None, dtype: np.dtype | None, op: str, call: str, root: int = -1) -> bytes:
    """The header of an array of this shape and dtype, cached (every call builds one).

    shape None: no array (dtype None) or, with a dtype, a 1-d array whose size may differ by rank.
    """
    h = np.zeros((), FIXED)
    h["root"], h["op"], h["call"] = root, op.encode()[:8], call.encode()[:32]
    if dtype is not None:
        h["dtype"] = dtype_code(dtype).encode()[:16]
    if shape is None:
        h["ndim"] = -1 if dtype is None else -2
        return h.tobytes()
    assert dtype is not None, "a shape needs a dtype"
    h["size"] = int(np.prod(shape, dtype=np.int64))
    h["nbytes"], h["ndim"] = h["size"] * dtype.itemsize, len(shape)
    return h.tobytes() + np.asarray(shape, dtype="<i8").tobytes()


def handshake(comm: Any, head: bytes, x: np.ndarray = NOTHING, f: Op | None = None) -> tuple[np.ndarray, bool]:
    """Does every rank bring the header ``head``? The same answer on every rank, with f-allreduce of a short x.

    Recursive doubling with the fold (fold.py); every message is [head | status | partial result]
    and goes to the same partners, with the same tag, whatever the call. The status word says
    whether the ranks the sender stands for all brought the sender's header (AGREED) or not
    (DIFFERS). A rank that receives DIFFERS or a header unlike its own sends DIFFERS from then on,
    so after the last step every rank knows whether any two ranks differ (the group a rank stands
    for doubles each step and in the end is all ranks; a group all of whose ranks agree has one
    header, its members'). Receive buffers hold ROOM bytes, the most any rank sends, so a rank
    that brings more than this one expects cannot overflow them.

    While the ranks agree, the partial results are combined as in recursive_doubling.py (operands
    in rank order into a new array, so both partners get the same bits): with a flat ``x`` of at
    most INLINE bytes and its op ``f``, the result is f over every rank's x. With f None only the
    headers are compared. Returns (result, True) or (meaningless, False) on every rank; on one
    rank (p == 1) (x itself, True).
    """
    if x.nbytes > INLINE:
        raise ValueError(f"handshake: {x.nbytes} bytes of data, more than INLINE = {INLINE} (the receivers' room)")
    rank = comm.Get_rank()
    fold = fold_of(rank, comm.Get_size())
    expected = head + AGREED  # how a message from ranks that agree with this one starts
    room = np.empty(ROOM, np.uint8)
    mine, agreed = x, True
    if fold.extra and fold.newrank < 0:  # fold in: even rank 2i hands x to 2i+1 and waits for the answer
        exchange(comm, head, b"".join((expected, x.data)), rank + 1, room)
        agreed = room.data[: len(expected)] == expected
        if agreed and f is not None:
            mine = np.frombuffer(room, x.dtype, x.size, len(expected)).copy()  # a result of its own
        return mine, agreed
    if fold.extra:
        exchange(comm, head, None, rank - 1, room)
        mine, agreed = _merge(room, expected, mine, f, lower=True)
    for peer in fold.doubling_peers:
        exchange(comm, head, b"".join((head, AGREED if agreed else DIFFERS, mine.data)), peer, room)
        if agreed:
            mine, agreed = _merge(room, expected, mine, f, lower=peer < rank)
    if fold.extra:  # fold out: 2i+1 hands the answer (and result) back to 2i
        comm.Send(b"".join((head, AGREED if agreed else DIFFERS, mine.data)), rank - 1, TAG_CHECK)
    return mine, agreed


def exchange(comm: Any, head: bytes, message: bytes | None, peer: int, room: np.ndarray) -> None:
    """One step of the handshake with ``peer``: send ``message`` (unless None) and receive its message into ``room``.

    A partner that never enters the handshake (it passed ``check=False``, or called something else) leaves this
    rank waiting here. On MPI's own communicator the wait is polled, so that a rank that has waited STALL seconds
    while a message of a collective's schedule (any other collectives tag) is pending for it says so, in one line
    (``say_if_skipped``), then waits on: a wait cannot tell a late partner from one that will never come, and only
    ``MINIDL_COMM_TIMEOUT`` turns it into an error. Other communicators (in-process ranks, the simulator's, minidl's
    TimeoutComm) wait as they always do, and find a deadlock in their own way.
    """
    if type(comm).__module__ != "mpi4py.MPI":
        if message is None:
            comm.Recv(room, peer, TAG_CHECK)
        else:
            comm.Sendrecv(message, peer, TAG_CHECK, room, peer, TAG_CHECK)
        return
    from mpi4py import MPI

    requests = [comm.Irecv(room, peer, TAG_CHECK)]
    if message is not None:
        requests.append(comm.Isend(message, peer, TAG_CHECK))
    wait_in_check(comm, head, functools.partial(MPI.Request.Testall, requests))


def wait_in_check(comm: Any, head: bytes, done: Callable[[], bool]) -> None:
    """Poll ``done()`` (an MPI test of the handshake's requests) until it is True, saying once if a partner skipped."""
    if done():
        return
    start = time.monotonic()
    looked: float | None = start
    while not done():
        now = time.monotonic()
        if now - start > STALL / 10:
            time.sleep(0.0005)  # a long wait leaves the core to the ranks it waits for
        if looked is not None and now - start > STALL and now - looked > STALL / 4:  # look 4 times a STALL, say once
            looked = None if say_if_skipped(comm, head, now - start) else now


SCHEDULE_TAGS = [t for t in range(TAG_CHECK + 1, TAG_COUNTS + 1) if t != TAG_HEADERS]  # the collectives' other tags
STALL = 2.0  # seconds in one step of the handshake before a rank looks for a partner that skipped it


def say_if_skipped(comm: Any, head: bytes, waited: float) -> bool:
    """Print one line and return True if a message of another collective's schedule waits for this rank."""
    from mpi4py import MPI

    status = MPI.Status()
    for tag in SCHEDULE_TAGS:
        if comm.Iprobe(MPI.ANY_SOURCE, tag, status):
            other = status.Get_source()
            call = np.frombuffer(head, FIXED, 1)[0]["call"].decode()
            print(
                f"collectives: rank {comm.Get_rank()} of {comm.Get_size()} has waited {waited:.0f} s in the agreement"
                f" check of {call} while rank {other} sends it a message of a collective's schedule (tag {tag})"
                f" without it: did rank {other} pass check=False, or call another collective? Every rank must pass"
                " the same check. This rank waits on (MINIDL_COMM_TIMEOUT=SECONDS ends such a wait with an error).",
                file=sys.stderr,
                flush=True,
            )
            return True
    return False


def _merge(room: np.ndarray, expected: bytes, mine: np.ndarray, f: Op | None, lower: bool) -> tuple[np.ndarray, bool]:
    """One received handshake message: (f of the two partial results, True) if the sender agrees, else (mine, False)."""
    n = len(expected)
    if room.data[:n] != expected:
        return mine, False
    if f is None:
        return mine, True
    return combine(f, mine, np.frombuffer(room, mine.dtype, mine.size, n), theirs_is_lower=lower), True


def raise_unless_agreed(comm: Any, head: bytes, agreed: bool) -> None:
    """After a handshake (whose answer every rank shares): if it failed, gather every header and raise on every rank."""
    if not agreed:
        table = exchange_headers(comm, head + context_bytes(ROW - len(head)))
        raise_mismatch(table, disagreement(table))


def context_bytes(room: int) -> bytes:
    """This rank's ``CONTEXT()`` as text for the unused end of its row in a mismatch's table (``describe`` adds it)."""
    text = CONTEXT[0]() if CONTEXT else ""
    return text.encode("utf-8", "replace")[:room]


def exchange_headers(comm: Any, head: bytes) -> np.ndarray:
    """The headers of all p ranks, the same table on every rank: p rows of ROW bytes (``parse`` reads one).

    A recursive-doubling allgather (fold.allgather_blocks): (log2 p' + 2d) alpha + about p ROW bytes beta.
    """
    p, rank = comm.Get_size(), comm.Get_rank()
    table = np.zeros((p, ROW), dtype=np.uint8)
    table[rank, : len(head)] = np.frombuffer(head, np.uint8)
    allgather_blocks(comm, table.reshape(-1), ROW, tag=TAG_HEADERS)
    return table


def parse(row: np.ndarray) -> tuple[np.void, tuple[int, ...] | None]:
    """A row of the table: its FIXED part and its shape (None without one)."""
    h = row[: FIXED.itemsize].view(FIXED)[0]
    ndim = int(h["ndim"])
    if ndim < 0:
        return h, None
    return h, tuple(int(d) for d in row[FIXED.itemsize : FIXED.itemsize + 8 * ndim].view("<i8"))


def dtype_label(code: str) -> str:
    """A header's dtype code in words: "float64", "(float64, int64) pairs" (maxloc's); the code if unknown."""
    try:
        dtype = dtype_from_code(code)
    except (TypeError, ValueError, SyntaxError):  # NumPy parses some strings as Python: any error may come
        return code
    if dtype.hasobject:
        return "object (Python objects, or a minidl Tensor: pass tensor.data)"
    return f"({dtype['value'].name}, {dtype['index'].name}) pairs" if dtype.names else dtype.name


def describe(row: np.ndarray) -> str:
    h, shape = parse(row)
    dtype = dtype_label(h["dtype"].decode())
    if h["ndim"] == -1 and not h["op"] and h["root"] < 0:
        return h["call"].decode() + _context(row)  # a call that moves no array (a step agreement, a layout check)
    if h["ndim"] == -1:
        what = "no array"
    elif h["ndim"] == -2:
        what = f"a 1-d array of dtype {dtype} (sizes may differ)"
    else:
        what = f"shape {shape} dtype {dtype}"
    root = f", root {int(h['root'])}" if h["root"] >= 0 else ""
    return f"{h['call'].decode()} with {what}, op {h['op'].decode()!r}{root}{_context(row)}"


def _context(row: np.ndarray) -> str:
    """The sender's CONTEXT text after its header in ``row`` (" (...)"), or nothing."""
    ndim = int(parse(row)[0]["ndim"])
    text = row[FIXED.itemsize + 8 * max(ndim, 0) :].tobytes().rstrip(b"\0").decode("utf-8", "replace")
    return f" ({text})" if text else ""


def disagreement(table: np.ndarray) -> str:
    """What a table of headers disagrees on, first the collective, then the root, else the arrays (or op)."""
    rows = [parse(row)[0] for row in table]
    if len({h["call"] for h in rows}) > 1:
        return "ranks called different collectives (or algorithms)"
    if len({int(h["root"]) for h in rows}) > 1:
        return "ranks disagree on the root"
    return "ranks disagree on their arrays"


# What this rank is doing, in a few words, for its row of a mismatch's table: a library above the collectives
# may set one function (minidl: "2 optimizer steps done"), read on the rank's own thread.
CONTEXT: list[Callable[[], str]] = []

# A caller's words for a mismatch that involves one of its calls (by the start of the call's name), added to the
# error on every rank: minidl's optimizer steps say why ranks end up at different steps.
NOTES: dict[str, str] = {}


def raise_mismatch(table: np.ndarray, problem: str) -> None:
    groups: dict[bytes, list[int]] = {}
    for rank, row in enumerate(table):
        groups.setdefault(row.tobytes(), []).append(rank)
    lines = [f"ranks {ranks}: {describe(table[ranks[0]])}" for ranks in groups.values()]
    call = parse(table[0])[0]["call"].decode()  # rank 0's, so that every rank's message is the same
    calls = [parse(row)[0]["call"].decode() for row in table]
    notes = sorted({note for start, note in NOTES.items() if any(c.startswith(start) for c in calls)})
    raise MismatchError(f"{call}: {problem} (every rank raises this error):\n  " + "\n  ".join(lines + notes))


def check_sendable(dtype: np.dtype, call: str) -> None:
    """Refuse Python objects (what np.asarray makes of a minidl Tensor, too): they have no bytes to send.
    Called after the handshake, where every rank knows the dtypes agree, so that every rank raises it."""
    if dtype.hasobject:
        raise TypeError(
            f"{call}: dtype object (Python objects, or a minidl Tensor) cannot be sent: collectives move NumPy "
            "arrays of numbers; pass tensor.data for a Tensor"
        )


NOT_A_RANK = -3  # the header's root of a root that is no int (0.0, "0"): the handshake then fails where others differ


def root_code(root: Any) -> int:
    """``root`` as the header's int: itself for an int (not a bool), else NOT_A_RANK (``check_root`` says why)."""
    try:
        return NOT_A_RANK if isinstance(root, bool) else operator.index(root)
    except TypeError:
        return NOT_A_RANK


def check_root(root: Any, call: str, p: int) -> None:
    """After the handshake (so every rank raises alike): a root is an int rank in 0..p-1."""
    if root_code(root) == NOT_A_RANK:
        raise TypeError(f"{call}: root must be a rank, an int in 0..{p - 1}, got {root!r} ({type(root).__name__})")
    if not 0 <= root < p:
        raise ValueError(f"{call}: root {root} out of range for {p} ranks")


def agree(comm: Any, x: Any, op: str | None, call: str, root: int = -1, check: bool = True, varying: bool = False):
    """Check that every rank brings the same shape, dtype, op and root; return (flat x, op function).

    The flat x is a view of the caller's array (never written), native byte order and contiguous.
    With ``varying`` only the dtype is compared (the v-collectives: sizes differ by rank). The op
    is validated after the handshake, so a bad op or dtype raises on every rank alike.
    """
    x = as_native_array(x)
    code = root_code(root)
    if check and comm.Get_size() > 1:
        head = header_bytes(None, x.dtype, op or "", call, code) if varying else header(x, op or "", call, code)
        raise_unless_agreed(comm, head, handshake(comm, head)[1])
    if root != -1:
        check_root(root, call, comm.Get_size())
    check_sendable(x.dtype, call)
    f = reduction(op, x.dtype) if op is not None else None
    return x.reshape(-1), f


def checked_reduction(schedule: Callable, call: str, carries_short: bool = False) -> Callable:
    """The public allreduce of a schedule(comm, flat x, f) -> flat result: validate, check, run, reshape.

    With ``carries_short`` (recursive doubling) a vector of at most INLINE bytes travels in the
    handshake, which is then the whole allreduce (see the module docstring).
    """

    def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
        x = as_native_array(x)
        shape, flat = x.shape, x.reshape(-1)
        try:
            check_sendable(x.dtype, call)
            f, error = reduction(op, x.dtype), None
        except (TypeError, ValueError) as e:  # raised after the check, so that it is the same on every rank
            f, error = None, e
        if check and comm.Get_size() > 1:
            head = header_bytes(shape, x.dtype, str(op), call)
            short = carries_short and flat.nbytes <= INLINE
            out, agreed = handshake(comm, head, flat, f) if short else handshake(comm, head)
            raise_unless_agreed(comm, head, agreed)
            if short and error is None:
                return out.reshape(shape)  # the handshake was the allreduce
        if error is not None:
            raise error
        from collectives.wire_format import wire

        return schedule(wire(comm, x.dtype), flat, f).reshape(shape)

    allreduce.__name__ = allreduce.__qualname__ = call.replace(".", "_")
    return allreduce


def agree_on_counts(comm: Any, counts: Any, x: np.ndarray, op: str, call: str) -> list[int]:
    """Check that every rank passes the same ``counts`` (p non-negative ints adding up to x.size), x's shape and op.

    The handshake carries [counts, -counts] reduced by max (see the module docstring): one pass.
    Counts that make no sense on a rank travel as -1s, so that every rank raises the error.
    """
    p = comm.Get_size()
    c = np.full(p, -1, np.int64)
    try:
        given = np.array(counts, dtype=np.int64).reshape(-1)
        good = given.size == p and not (given < 0).any() and int(given.sum()) == x.size
    except (TypeError, ValueError):
        good = False
    if good:
        c = given
    if p > 1:
        head = header(x, op, call)
        both, agreed = handshake(comm, head, np.concatenate([c, -c]), np.maximum)
        raise_unless_agreed(comm, head, agreed)
        if not np.array_equal(both[:p], -both[p:]):
            table = np.zeros((p, p), dtype=np.int64)
            table[comm.Get_rank()] = c
            allgather_blocks(comm, table.reshape(-1), p, tag=TAG_HEADERS)
            lines = "\n  ".join(f"rank {r}: {row.tolist()}" for r, row in enumerate(table))
            raise MismatchError(
                f"{call}: ranks disagree on the counts (-1s: counts that are not {p} non-negative integers adding "
                f"up to the array's size; every rank raises this error):\n  {lines}"
            )
    if not good:
        raise ValueError(f"{call}: counts must be {p} non-negative integers adding up to x.size = {x.size}")
    return c.tolist()


def agree_with_root(comm: Any, x: Any, call: str, root: int, same_as_root: bool) -> tuple[tuple, np.dtype]:
    """For broadcast and scatter: non-roots may pass None; return the root's shape and dtype.

    With ``same_as_root`` (broadcast), an array a non-root does pass must match the root's;
    without (scatter), whatever non-roots pass is ignored. The handshake compares only the call and
    the root (headers without an array); then every rank needs the table of headers anyway, for
    the root's shape.
    """
    p, rank = comm.Get_size(), comm.Get_rank()
    code = root_code(root)
    _, agreed = handshake(comm, header(None, "", call, code))
    mine = None if x is None or (rank != root and not same_as_root) else as_native_array(x)
    table = exchange_headers(comm, header(mine, "", call, code))
    if not agreed:  # on a rank of any collective whose handshake failed: the same message
        raise_mismatch(table, disagreement(table))
    check_root(root, call, p)
    ref, shape = parse(table[root])
    if shape is None:
        raise_mismatch(table, f"the root (rank {root}) passed no array")
        raise AssertionError  # raise_mismatch always raises
    for row in table:
        h, theirs = parse(row)
        if (
            h["call"] != ref["call"]
            or h["root"] != ref["root"]
            or (theirs is not None and row.tobytes() != table[root].tobytes())
        ):
            raise_mismatch(table, "ranks disagree with the root")
    dtype = _dtype_of(ref)
    check_sendable(dtype, call)
    return shape, dtype


def _dtype_of(h: np.void) -> np.dtype:
    return dtype_from_code(h["dtype"].decode())


def dtype_from_code(code: str) -> np.dtype:
    """The dtype that ``dtype_code`` wrote as ``code``."""
    if not code.startswith("("):
        return np.dtype(code)
    value, index = code[1 : code.index(")")].split(",")
    return np.dtype([("value", value), ("index", index)], align=code.endswith("a"))
