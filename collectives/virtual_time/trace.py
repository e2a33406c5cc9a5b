"""Traces of the real collective code: what each rank sends, receives and reduces, without running it in parallel.

A collective's schedule depends on p, the rank and the sizes, never on the values. So one rank's
calls can be recorded by running that rank's own algorithm code, alone, against a ``TraceComm``:
a communicator with mpi4py's point-to-point names (Get_rank, Get_size, Send, Recv, Sendrecv,
Isend, Irecv, requests with Wait/Test/Waitall, Dup, Barrier) whose calls move nothing and only
append an ``Event``. The data are size-only:
- buffers are ``np.empty`` arrays that nothing ever writes or reads, so the operating system
  never backs them with memory (a 100 MiB "vector" costs no RAM);
- the reduction op is ``CountingOp``, a stand-in for the ufunc (common.reduction passes it
  through) that records the bytes it would reduce, for the gamma term, and computes nothing.

    traces = trace("ring", p=8, nbytes=1 << 20)        # traces[r]: rank r's events, in program order
    trace("reduce_scatter:recursive_halving", 6, 4096)  # a building block: "collective:algorithm"

The agreement check (the handshake every public collective starts with) is part of a real call;
``check=False`` (the default) traces the algorithm alone, which is what cost.predict describes.
The check is the one place where the code looks at what it received (a mismatch leads to the
exchange of headers), so a traced receive with one of the check's tags gets the first message rank
0 sent with that tag (ranks are traced in order), repeated to fill it: the ranks are taken to agree.
Events: ("send" | "recv" | "isend" | "irecv", peer, tag, nbytes), "sendrecv" with the receive's
source, tag and buffer size as well, "wait" with the request ids, "reduce" with the bytes reduced
since the last call. Receives record their buffer's size (a handshake receives into more room than
it is sent); what a message costs is the sender's byte count.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple

import numpy as np

from collectives.common import TAG_CHECK, TAG_HEADERS

ANY_SOURCE, ANY_TAG = -2, -1  # MPICH's values, as in inprocess.py
CHECK_TAGS = (TAG_CHECK, TAG_HEADERS)  # the agreement check's messages


CALLS = ("send", "recv", "sendrecv", "isend", "irecv", "wait", "reduce")
SEND, RECV, SENDRECV, ISEND, IRECV, WAIT, REDUCE = range(7)  # a row's first field: CALLS[code]


class Event(NamedTuple):
    """One call of one rank. ``peer``/``tag``/``nbytes``: the send's (or the receive's for recv/irecv).

    A trace is recorded as rows of nine ints, (CALLS.index(call), peer, ..., context), which is
    what the replay reads; ``trace()`` gives them as Events. Waitall is one "wait" per request.
    """

    call: str  # send, recv, sendrecv, isend, irecv, wait, reduce
    peer: int = -1
    tag: int = -1
    nbytes: int = 0  # bytes sent, receive buffer bytes (recv/irecv), or bytes reduced (reduce)
    source: int = -1  # sendrecv: the receive's source, tag and buffer bytes
    recvtag: int = -1
    recvbytes: int = 0
    request: int = -1  # isend/irecv: its id; wait: the id it waits for
    context: int = 0  # which communicator (Dup gives a new one); messages match only within one


Row = tuple[int, int, int, int, int, int, int, int, int]


def _nbytes(buf: Any) -> int:
    if isinstance(buf, np.ndarray):
        return buf.nbytes
    if isinstance(buf, (list, tuple)):
        raise TypeError("TraceComm takes plain buffers (NumPy arrays or bytes), not [buffer, datatype] specs")
    return memoryview(buf).nbytes


class CountingOp:
    """Stands in for a reduction ufunc: ``op(a, b, out=c)`` records out's bytes (a's without out), computes nothing."""

    traced = True  # common.reduction passes it through

    def __init__(self, name: str, comm: TraceComm):
        self.name, self.comm = name, comm

    def __call__(self, a: np.ndarray, b: Any, out: np.ndarray | None = None) -> np.ndarray:
        self.comm._reduce((a if out is None else out).nbytes)
        return np.empty_like(a) if out is None else out

    def __str__(self) -> str:
        return self.name


class TraceRequest:
    """A posted Isend/Irecv; Wait and Test record a "wait" (Test: the request is taken to be done)."""

    def __init__(self, comm: TraceComm, ident: int):
        self.comm, self.id = comm, ident

    def Wait(self, status: Any = None) -> bool:
        self.comm.rows.append((WAIT, -1, -1, 0, -1, -1, 0, self.id, self.comm.context))
        return True

    Test = Wait  # a schedule that depends on timing cannot be traced

    @staticmethod
    def Waitall(requests: list[TraceRequest], statuses: Any = None) -> bool:
        for request in requests:
            request.Wait()
        return True


class TraceComm:
    """One rank's communicator for tracing: every call appends a row to ``rows`` and moves no data."""

    def __init__(self, rank: int, size: int, rows: list | None = None, context: int = 0, echo: dict | None = None):
        if not 0 <= rank < size:
            raise ValueError(f"TraceComm: rank {rank} out of range for {size} ranks")
        self._rank, self._size, self.context = rank, size, context
        self.rows: list[Row] = [] if rows is None else rows
        self._echo: dict[int, bytes] = {} if echo is None else echo  # check tag -> first message sent (see above)
        self._counter = [0, 0]  # next request id, Dups made (shared by every Dup of this rank's comm)

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return self._size

    rank = property(Get_rank)
    size = property(Get_size)

    def op(self, name: str = "sum") -> CountingOp:
        """The size-only stand-in of reduction ``name`` (pass it as the collective's op)."""
        return CountingOp(name, self)

    @property
    def events(self) -> list[Event]:
        return [Event(CALLS[row[0]], *row[1:]) for row in self.rows]

    # -- recording -----------------------------------------------------------------------------------
    def _reduce(self, nbytes: int) -> None:
        rows = self.rows
        if rows and rows[-1][0] == REDUCE:  # reductions between two calls: one row
            rows[-1] = (REDUCE, -1, -1, rows[-1][3] + nbytes, -1, -1, 0, -1, 0)
        elif nbytes:
            rows.append((REDUCE, -1, -1, nbytes, -1, -1, 0, -1, 0))

    def _peer(self, peer: int, what: str, any_ok: bool) -> int:
        if not (0 <= peer < self._size or (any_ok and peer == ANY_SOURCE)):
            raise ValueError(f"{what}: rank {peer} out of range for a communicator of size {self._size}")
        return peer

    def _sent(self, buf: Any, tag: int) -> int:
        """The bytes of a message sent; remembers the agreement check's first message of each tag."""
        if tag in CHECK_TAGS and tag not in self._echo:
            self._echo[tag] = bytes(memoryview(buf).cast("B"))
        return _nbytes(buf)

    def _received(self, buf: Any, tag: int) -> int:
        """The bytes of a receive buffer; fills it with the first check message of its tag (see above)."""
        if tag in CHECK_TAGS and tag in self._echo and _nbytes(buf):
            room = buf.reshape(-1).view(np.uint8) if isinstance(buf, np.ndarray) else np.frombuffer(buf, np.uint8)
            room[...] = np.resize(np.frombuffer(self._echo[tag], np.uint8), room.size)  # the message, repeated
        return _nbytes(buf)

    def _request(self, code: int, peer: int, tag: int, nbytes: int) -> TraceRequest:
        self._counter[0] += 1
        ident = self._counter[0] - 1
        self.rows.append((code, peer, tag, nbytes, -1, -1, 0, ident, self.context))
        return TraceRequest(self, ident)

    # -- mpi4py's point-to-point subset ----------------------------------------------------------
    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        dest = self._peer(dest, "Send", False)
        self.rows.append((SEND, dest, tag, self._sent(buf, tag), -1, -1, 0, -1, self.context))

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None) -> None:
        source = self._peer(source, "Recv", True)
        self.rows.append((RECV, source, tag, self._received(buf, tag), -1, -1, 0, -1, self.context))

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG, status: Any = None) -> None:  # fmt: skip
        """One SENDRECV row (its own call, not an Irecv and an Isend: the replay models it as one exchange)."""
        if recvbuf is None:
            raise TypeError("Sendrecv: recvbuf is required (buffer-based calls only)")
        if not (0 <= dest < self._size and 0 <= source < self._size):
            self._peer(dest, "Sendrecv", False), self._peer(source, "Sendrecv", True)
        sent = self._sent(sendbuf, sendtag)  # before the receive: a handshake receives what it sends
        recvbytes = self._received(recvbuf, recvtag)
        self.rows.append((SENDRECV, dest, sendtag, sent, source, recvtag, recvbytes, -1, self.context))

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> TraceRequest:
        return self._request(ISEND, self._peer(dest, "Isend", False), tag, self._sent(buf, tag))

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> TraceRequest:
        return self._request(IRECV, self._peer(source, "Irecv", True), tag, self._received(buf, tag))

    def Dup(self) -> TraceComm:
        """The same rank in a fresh context (every rank Dups in the same order, so the ids agree)."""
        self._counter[1] += 1
        context = (self.context + 1) * 1000 + self._counter[1]
        dup = TraceComm(self._rank, self._size, self.rows, context, self._echo)
        dup._counter = self._counter
        return dup

    Clone = Dup

    def Barrier(self) -> None:
        """Dissemination barrier (ceil(log2 p) rounds of 1-byte Sendrecv), in a context of its own."""
        dist, me, p = 1, self._rank, self._size
        while dist < p:
            self.rows.append((SENDRECV, (me + dist) % p, 0, 1, (me - dist) % p, 0, 1, -1, -1 - self.context))
            dist *= 2

    def Free(self) -> None:
        pass


# -- what can be traced --------------------------------------------------------------------------
def _allreduce(algorithm: str) -> Callable:
    def call(comm: TraceComm, x: np.ndarray, op: CountingOp, check: bool) -> Any:
        from collectives import dispatch

        return dispatch.allreduce(comm, x, op, algorithm=algorithm, check=check)  # type: ignore[arg-type]

    return call


def _block(name: str, algorithm: str | None) -> Callable:
    def call(comm: TraceComm, x: np.ndarray, op: CountingOp, check: bool) -> Any:
        from collectives import dispatch

        fn = getattr(dispatch, name)
        if name == "reduce_scatter":
            return fn(comm, x, op, algorithm=algorithm)
        if name in ("allgather", "alltoall"):
            return fn(comm, x, algorithm=algorithm)
        if name == "reduce":
            return fn(comm, x, op, root=0)
        if name in ("scan", "exscan"):
            return fn(comm, x, op)
        if name == "barrier":
            return fn(comm)
        return fn(comm, x, root=0)  # broadcast, gather, scatter

    return call


BLOCKS = {  # name: (collective, algorithm); the first of each collective's names is its default
    "reduce_scatter": ("reduce_scatter", "ring"),
    "reduce_scatter:ring": ("reduce_scatter", "ring"),
    "reduce_scatter:recursive_halving": ("reduce_scatter", "recursive_halving"),
    "allgather": ("allgather", "ring"),
    "allgather:ring": ("allgather", "ring"),
    "allgather:recursive_doubling": ("allgather", "recursive_doubling"),
    "alltoall": ("alltoall", "auto"),
    "alltoall:pairwise": ("alltoall", "pairwise"),
    "alltoall:bruck": ("alltoall", "bruck"),
    **{name: (name, None) for name in ("broadcast", "reduce", "gather", "scatter", "scan", "exscan", "barrier")},
}
PER_PEER = ("scatter", "alltoall")  # calls whose input is (p, n): n bytes for each rank


def _hierarchical(name: str) -> Callable | None:
    """ "hierarchical:K" (the leader schedule) or "hierarchical_rs:K" (the reduce-scatter one): hierarchical.py's
    allreduce with nodes of K consecutive ranks (ring across them), or None."""
    from collectives.nodes import NAMES, hierarchical_allreduce

    head, _, k = name.partition(":")
    if head not in NAMES or not k.isdigit() or int(k) < 1:
        return None

    def call(comm: TraceComm, x: np.ndarray, op: CountingOp, check: bool) -> Any:
        return hierarchical_allreduce(comm, x, op, int(k), check=check, schedule=NAMES[head])  # type: ignore[arg-type]

    return call


def calls() -> dict[str, Callable]:
    """Every traceable call by name: the allreduce algorithms, "auto", and "collective[:algorithm]" blocks."""
    from collectives.cost import ALGORITHMS

    table = {name: _allreduce(name) for name in (*ALGORITHMS, "auto")}
    table.update({name: _block(*block) for name, block in BLOCKS.items()})
    return table


def _input(call: str, p: int, nbytes: int, dtype: np.dtype) -> np.ndarray:
    """A size-only input of ``nbytes`` per rank (scatter, alltoall: (p, n), n bytes for each rank)."""
    if nbytes < 0 or nbytes % dtype.itemsize:
        raise ValueError(
            f"trace: nbytes must be a non-negative multiple of {dtype}'s {dtype.itemsize} bytes, got {nbytes}"
        )
    n = nbytes // dtype.itemsize
    return np.empty((p, n) if call.split(":")[0] in PER_PEER else n, dtype)  # never written: no memory behind it


def trace(
    algorithm: str, p: int, nbytes: int, dtype: Any = np.float32, op: str = "sum", check: bool = False
) -> list[list[Event]]:
    """Each rank's events in one call of ``algorithm`` on ``p`` ranks with ``nbytes`` per rank.

    ``algorithm``: an allreduce algorithm (cost.ALGORITHMS or "auto") or a block (see ``calls()``).
    ``check``: include the agreement check (False: the algorithm alone, as cost.predict counts it;
    the check's messages are recognised by their tags). Raises MemoryError before starting when the
    traces would not fit in the memory available.
    """
    return [
        [Event(CALLS[row[0]], *row[1:]) for row in rows] for rows in trace_rows(algorithm, p, nbytes, dtype, op, check)
    ]


def trace_rows(
    algorithm: str,
    p: int,
    nbytes: int,
    dtype: Any = np.float32,
    op: str = "sum",
    check: bool = False,
    ranks: Sequence[int] | None = None,
) -> list[list[Row]]:
    """``trace`` as rows of ints (see Event), the form the replay reads; only ``ranks`` (default all)."""
    table = calls()
    fn = table.get(algorithm) or _hierarchical(algorithm)
    if fn is None:
        raise ValueError(
            f"trace: unknown call {algorithm!r}: expected one of {', '.join(table)}, hierarchical:K, hierarchical_rs:K"
        )
    if not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"trace: p must be a positive integer, got {p!r}")
    check_memory(algorithm, int(p), traced=None if ranks is None else len(ranks) + 1)
    dtype = np.dtype(dtype)
    x = _input(algorithm, p, nbytes, dtype)
    return trace_function(int(p), lambda comm: fn(comm, x, comm.op(op), check), keep_check=check, ranks=ranks)


def trace_function(
    p: int, fn: Callable[[TraceComm], Any], keep_check: bool = True, ranks: Sequence[int] | None = None
) -> list[list[Row]]:
    """``fn(comm)`` run on every rank of p in turn (or those in ``ranks``), each with its own TraceComm.

    Returns the rows of each rank. ``fn`` must not depend on received values (there are none).
    Use ``comm.op("sum")`` as the op. Without ``keep_check``, the agreement check's messages (tags
    CHECK_TAGS) are left out. Rank 0 is always traced first (the check's receives echo its messages).
    """
    traces: list = []
    echo: dict = {}
    ranks = range(p) if ranks is None else list(ranks)
    if ranks and ranks[0] != 0:  # rank 0 first, for the check's echo (its own rows are not kept)
        fn(TraceComm(0, p, echo=echo))
    for rank in ranks:
        comm = TraceComm(rank, p, echo=echo)
        fn(comm)
        traces.append(comm.rows if keep_check else _without_check(comm.rows))
    return traces


def _without_check(rows: list[Row]) -> list[Row]:
    """The rows without the check's messages (a handshake Sendrecv has both tags in CHECK_TAGS) or their waits."""
    dropped = {row[7] for row in rows if row[0] in (ISEND, IRECV) and row[2] in CHECK_TAGS}
    kept: list[Row] = []
    for row in rows:
        if row[0] in (SEND, RECV, SENDRECV, ISEND, IRECV) and row[2] in CHECK_TAGS:
            continue
        if row[0] == WAIT and row[7] in dropped:
            continue
        if row[0] == REDUCE and kept and kept[-1][0] == REDUCE:
            kept[-1] = (REDUCE, -1, -1, kept[-1][3] + row[3], -1, -1, 0, -1, 0)
        else:
            kept.append(row)
    return kept


# -- memory ----------------------------------------------------------------------------------------
EVENT_BYTES = 200  # an Event in a list: the tuple, its fields' ints, the list slot (measured: ~150-190)


def events_estimate(call: str, p: int) -> int:
    """About how many events the traces of ``call`` on p ranks hold: 3 per message (send, receive, reduction)."""
    k = p.bit_length() - 1
    q, rem = 1 << k, p - (1 << k)
    messages = {
        "ring": 2 * p * (p - 1),
        "tree": 2 * (p - 1),
        "naive": 2 * (p - 1),
        "recursive_doubling": q * k + 2 * rem,
        "rabenseifner": 2 * q * k + 2 * rem,
        "reduce_scatter": p * (p - 1),  # the ring's; recursive halving sends fewer
        "allgather": p * (p - 1),
        "hierarchical": 2 * p * (p - 1),  # at most: nodes of one rank make it a ring
        "hierarchical_rs": 2 * p * (p - 1),
    }.get(call.split(":")[0], 2 * p * max(k, 1))  # auto, broadcast, reduce, gather, scatter: p log p at most
    return 3 * messages


def check_memory(call: str, p: int, available: int | None = None, traced: int | None = None) -> None:
    """Raise MemoryError, before tracing, if the traces of ``call`` on p ranks (or on ``traced`` of them)
    would not fit in memory."""
    need = events_estimate(call, p) * EVENT_BYTES * (traced or p) // p
    available = available_memory() if available is None else available
    if need > available:
        raise MemoryError(
            f"trace: {call} on p={p} ranks needs about {need / 2**30:.1f} GiB of traces, more than the "
            f"{available / 2**30:.1f} GiB available: use a smaller p"
        )


def available_memory() -> int:
    """Bytes of memory available now (/proc/meminfo's MemAvailable; unknown: no limit)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 1 << 62  # unknown: do not refuse
