"""One entry point per collective: ``allreduce(comm, x, op, algorithm="auto")`` and friends.

Every entry point here is the algorithm files' schedule behind the agreement check (agreement.py):
it validates the arguments, checks that every rank brings the same call, shape, dtype, op and root
(a MismatchError on every rank if not), runs the schedule on the flat array and gives the result
its shape. The algorithm files themselves know nothing of the check.

"auto" takes the algorithm the cost model predicts fastest (auto.py, ``choose_algorithm``).

Where a collective has a choice of algorithm (allreduce, reduce_scatter, allgather, alltoall), the
name in the agreement header is "algorithm.collective": ranks that pick different schedules, whose
messages would not match (a hang, a truncation or a wrong answer), get a MismatchError instead. The
others (reduce, broadcast, gather, scatter, barrier, scan, exscan, the v-collectives) have one
schedule each. An algorithm no one knows is checked like any other first, then refused on every rank.
"""

from __future__ import annotations

from typing import Any, NoReturn

import numpy as np

from collectives import fastpath
from collectives.agreement import (
    agree,
    agree_on_counts,
    agree_with_root,
    as_native_array,
    checked_reduction,
    handshake,
    header,
    raise_unless_agreed,
)
from collectives.algorithms import dissemination, exchange, naive, prefix, rabenseifner, recursive_doubling, ring, tree
from collectives.algorithms.fold import allgather_blocks
from collectives.auto import auto_algorithm
from collectives.common import block_bounds, bounds_of
from collectives.watch import watched
from collectives.wire_format import wire

PAGES = {  # the allreduce pages by name; each page's allreduce(comm, flat x, f) is the bare schedule
    "naive": naive,
    "tree": tree,
    "ring": ring,
    "recursive_doubling": recursive_doubling,
    "rabenseifner": rabenseifner,
}
ALLREDUCE = {
    name: checked_reduction(module.allreduce, f"{name}.allreduce", carries_short=module is recursive_doubling)
    for name, module in PAGES.items()
}


@watched
def allreduce(comm: Any, x: Any, op: str = "sum", algorithm: str = "auto", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, a new array on every rank (ops: common.py).

    ``algorithm``: "auto" (chosen by the cost model), "naive", "tree", "ring", "recursive_doubling"
    or "rabenseifner". ``x`` is never modified; every rank gets bitwise the same result. Integer sums
    and products that overflow wrap round modulo 2^bits, as NumPy's and MPI's do (common.py).

    ``check=False`` skips the agreement check on shape, dtype, op and algorithm: it saves the handshake,
    (log2 p' + 2d) latencies of ~100 bytes (agreement.py), worth it only for vectors of a few KiB. The price:
    nothing compares the ranks' arrays any more, so ranks that disagree get what MPI gives them: at p = 2
    unequal sizes give one rank a result of its own shape built from a short message (wrong, no error) and
    the other "message truncated"; at larger p a hang is possible. Every rank must pass the same ``check``: on
    MPI's own communicator a rank left in the check by one that skipped it says so after 2 s, in one line, and waits
    on (``MINIDL_COMM_TIMEOUT`` makes such a wait an error; agreement.py).
    """
    if check and type(x) is np.ndarray and algorithm in ("auto", "recursive_doubling"):
        out = fastpath.allreduce(comm, x, op, algorithm == "auto")  # short and checked: fastpath.py
        if out is not None:
            return out
    if algorithm == "auto":
        algorithm = auto_algorithm(comm.Get_size(), x.nbytes if isinstance(x, np.ndarray) else np.asarray(x).nbytes)
    run = ALLREDUCE.get(algorithm)
    if run is None:
        unknown(comm, x, algorithm, "allreduce", f"auto or one of {list(ALLREDUCE)}", check)
    return run(comm, x, op, check)


def unknown(comm: Any, x: Any, algorithm: str, collective: str, expected: str, check: bool = True) -> NoReturn:
    """Refuse ``algorithm`` on every rank: checked like a known one first (a rank that names another
    algorithm gets the MismatchError every rank gets, instead of waiting for this one), then refused."""
    agree(comm, x, None, f"{algorithm}.{collective}", check=check)
    raise ValueError(f"unknown {collective} algorithm {algorithm!r}: expected {expected}")


@watched
def reduce(comm: Any, x: Any, op: str = "sum", root: int = 0) -> np.ndarray | None:
    """The elementwise ``op`` of every rank's ``x`` on the root (a new array); None on the other ranks."""
    shape = np.shape(x)
    flat, f = agree(comm, x, op, "tree.reduce", root=root)
    out = tree.reduce(wire(comm, flat.dtype), flat, f, root)
    return None if out is None else out.reshape(shape)


@watched
def broadcast(comm: Any, x: Any, root: int = 0) -> np.ndarray:
    """The root's ``x`` as a new array on every rank (binomial tree).

    Other ranks pass an array of the same shape and dtype (its values are ignored), as with
    MPI_Bcast, or None: the root's shape and dtype come with the agreement check.
    """
    shape, dtype = agree_with_root(comm, x, "broadcast", root, same_as_root=True)
    if comm.Get_rank() == root:
        buf = np.array(as_native_array(x), dtype=dtype).reshape(-1)
    else:
        buf = np.empty(int(np.prod(shape)), dtype)
    tree.broadcast_into(wire(comm, dtype), buf, root)
    return buf.reshape(shape)


@watched
def reduce_scatter(comm: Any, x: Any, op: str = "sum", algorithm: str = "ring", counts: Any = None) -> np.ndarray:
    """Block r of the elementwise ``op`` of every rank's flattened ``x``, on rank r.

    Blocks: ``counts`` (p sizes adding up to x.size, the same on every rank, as MPI_Reduce_scatter's
    recvcounts) or, by default, np.array_split(., p)'s. ``algorithm``: "ring" or "recursive_halving".
    """
    impl = {"ring": ring.reduce_scatter, "recursive_halving": rabenseifner.reduce_scatter}
    if algorithm not in impl:
        unknown(comm, x, algorithm, "reduce_scatter", "'ring' or 'recursive_halving'")
    call = f"{algorithm}.reduce_scatter" + ("" if counts is None else "v")  # another header: no mixing the two
    if counts is None:
        flat, f = agree(comm, x, op, call)
        b = block_bounds(flat.size, comm.Get_size())
    else:
        flat = as_native_array(x).reshape(-1)
        b = bounds_of(agree_on_counts(comm, counts, flat, op, call))
        _, f = agree(comm, flat, op, call, check=False)
    return impl[algorithm](wire(comm, flat.dtype), flat, f, b)


@watched
def allgather(comm: Any, x: Any, algorithm: str = "ring") -> np.ndarray:
    """Every rank's ``x`` (same shape and dtype on all), stacked: shape (p, *x.shape) on every rank.

    ``algorithm``: "ring" (ring.allgather_into: p - 1 steps of one block) or "recursive_doubling"
    (fold.allgather_blocks: log2 p steps of doubling size, + 2 when p is not a power of two).
    """
    if algorithm not in ("ring", "recursive_doubling"):
        unknown(comm, x, algorithm, "allgather", "'ring' or 'recursive_doubling'")
    shape = np.shape(x)
    x, _ = agree(comm, x, None, f"{algorithm}.allgather")
    rank, p, m = comm.Get_rank(), comm.Get_size(), x.size
    out = np.empty(p * m, dtype=x.dtype)
    out[rank * m : (rank + 1) * m] = x
    if algorithm == "ring":
        ring.allgather_into(wire(comm, x.dtype), out, [r * m for r in range(p + 1)])
    else:
        allgather_blocks(wire(comm, x.dtype), out, m)
    return out.reshape((p, *shape))


@watched
def gather(comm: Any, x: Any, root: int = 0) -> np.ndarray | None:
    """Every rank's ``x`` (same shape and dtype on all) stacked on the root: shape (p, *x.shape); None elsewhere."""
    shape = np.shape(x)
    flat, _ = agree(comm, x, None, "gather", root=root)
    p, m = comm.Get_size(), flat.size
    out = naive.gatherv(wire(comm, flat.dtype), flat, [r * m for r in range(p + 1)], root)
    return None if out is None else out.reshape((p, *shape))


@watched
def scatter(comm: Any, x: Any, root: int = 0) -> np.ndarray:
    """Row r of the root's ``x`` (shape (p, ...)) on rank r. Other ranks pass None (anything else is ignored)."""
    p = comm.Get_size()
    shape, dtype = agree_with_root(comm, x, "scatter", root, same_as_root=False)
    if len(shape) == 0 or shape[0] != p:
        raise ValueError(f"scatter: the root's array must have shape ({p}, ...) for {p} ranks, got {shape}")
    m = int(np.prod(shape[1:]))
    flat = np.ascontiguousarray(x, dtype=dtype).reshape(-1) if comm.Get_rank() == root else None
    out = np.empty(m, dtype)
    naive.scatterv(wire(comm, dtype), flat, out, [r * m for r in range(p + 1)], root)
    return out.reshape(shape[1:])


@watched
def barrier(comm: Any, check: bool = True) -> None:
    """Wait until every rank has called barrier (dissemination: ceil(log2 p) rounds of empty messages).

    With ``check`` the handshake first makes sure every rank is in a barrier (a rank in another
    collective gets a MismatchError, as every rank does, instead of a hang).
    """
    if check and comm.Get_size() > 1:
        head = header(None, "", "barrier")
        raise_unless_agreed(comm, head, handshake(comm, head)[1])
    dissemination.barrier(comm)


@watched
def alltoall(comm: Any, x: Any, algorithm: str = "auto", check: bool = True) -> np.ndarray:
    """Row j of every rank's ``x`` (shape (p, ...), the same on all) goes to rank j: out[i] = rank i's x[r].

    ``algorithm``: "pairwise" (p - 1 rounds, each block sent once), "bruck" (ceil(log2 p) rounds,
    blocks forwarded) or "auto": Bruck for blocks of at most 256 bytes, as MPICH. The shape is
    checked after the agreement check, so a rank with the wrong number of rows is named on every rank.
    """
    shape = np.shape(x)
    p = comm.Get_size()
    if algorithm == "auto":
        row_bytes = int(np.prod(shape[1:])) * np.asarray(x).dtype.itemsize if len(shape) else 0
        algorithm = "bruck" if row_bytes <= 256 else "pairwise"
    if algorithm not in ("bruck", "pairwise"):
        unknown(comm, x, algorithm, "alltoall", "'auto', 'pairwise' or 'bruck'", check)
    flat, _ = agree(comm, x, None, f"{algorithm}.alltoall", check=check)
    if len(shape) == 0 or shape[0] != p:
        raise ValueError(f"alltoall: x must have shape ({p}, ...) for {p} ranks, got {shape}")
    m = flat.size // p
    if algorithm == "bruck":
        out = exchange.bruck(wire(comm, flat.dtype), flat, m)
    else:
        b = [r * m for r in range(p + 1)]
        out = exchange.pairwise(wire(comm, flat.dtype), flat, b, b)
    return out.reshape(shape)


@watched
def scan(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """x_0 op x_1 op ... op x_r on rank r (MPI_Scan), a new array of x's shape (recursive doubling)."""
    shape = np.shape(x)
    flat, f = agree(comm, x, op, "scan", check=check)
    out = prefix.scan(wire(comm, flat.dtype), flat, f, inclusive=True)
    assert out is not None
    return out.reshape(shape)


@watched
def exscan(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray | None:
    """x_0 op ... op x_(r-1) on rank r > 0 (MPI_Exscan), a new array of x's shape; None on rank 0."""
    shape = np.shape(x)
    flat, f = agree(comm, x, op, "exscan", check=check)
    out = prefix.scan(wire(comm, flat.dtype), flat, f, inclusive=False)
    return None if out is None else out.reshape(shape)
