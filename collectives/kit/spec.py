"""The collectives the kit checks: the user's function's signature, each rank's arrays, and the right answer.

The signatures are those of the package's own algorithm pages, so a student starts from ring.py's
``allreduce(comm, x, f)``. Arrays are flat; ``f`` is a NumPy ufunc (or loc.py's maxloc/minloc),
called as ``f(a, b, out=c)``; ``b`` are block offsets, block r being elements b[r]:b[r+1]
(``common.block_bounds``, ``common.bounds_of``).

    collective       fn(...)                 rank r returns
    allreduce        (comm, x, f)            f over every rank's x (a new array)
      inplace        (comm, buf, f)          None: buf holds it
    reduce           (comm, x, f, root)      the reduction on the root; None elsewhere
    broadcast        (comm, buf, root)       None: every rank's buf holds the root's
    reduce_scatter   (comm, x, f)            block r of the reduction, blocks as np.array_split's
    reduce_scatterv  (comm, x, f, b)         elements b[r]:b[r+1] of the reduction
    allgather        (comm, x)               every rank's x end to end
      inplace        (comm, buf, b)          None: buf, which held block r, holds every block
    allgatherv       (comm, x, b)            every rank's x end to end (rank i's has b[i+1]-b[i])
    gather           (comm, x, root)         every rank's x end to end on the root; None elsewhere
    gatherv          (comm, x, b, root)      likewise, rank i's x of b[i+1]-b[i] elements
    scatter          (comm, x, out, root)    None: out (n elements) holds block r of the root's x (p blocks
                                             of n); x is None off the root (out says the size and dtype)
    scatterv         (comm, x, out, b, root) None: out holds elements b[r]:b[r+1] of the root's x
    alltoall         (comm, x)               x is p blocks of n, block j for rank j; returns block j from rank j
    alltoallv        (comm, x, sb, rb)       x[sb[j]:sb[j+1]] to rank j; rank j's lands at rb[j]:rb[j+1]
    scan             (comm, x, f)            f over ranks 0..r
    exscan           (comm, x, f)            f over ranks 0..r-1 (rank 0: not defined)

Data that is moved, not computed (broadcast, gather, scatter, allgather, alltoall and their
v-variants), must arrive bit for bit, signed zeros and NaN payloads included. A reduction's answer
is exact for integers, bools, max/min, the logical and bitwise ops and
maxloc/minloc. Float sums and products may come in any order, and any order is within
(p - 1) eps sum|x_i| of the exact sum (Higham, "Accuracy and Stability of Numerical Algorithms",
2002, ch. 4), so the bound checked is 2 p eps sum|x_i|, with the reference itself summed in
float64 (complex128).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.common import LOGICAL, OPS, block_bounds, bounds_of
from collectives.kit.cases import Case, rank_data

Arrays = dict[str, Any]  # the caller's arrays on one rank, by argument name


@dataclass
class Expected:
    """Rank r's right answer; ``parts``: the inputs reduced into it (the float bound's scale), None if exact."""

    value: np.ndarray
    parts: list[np.ndarray] | None = None


@dataclass(frozen=True)
class Collective:
    name: str
    signature: str
    make: Callable[[Case, int, int, int], Arrays]  # (case, group size q, group rank r, world rank w)
    call: Callable[..., Any]  # (fn, comm, arrays, case, q, r, f) -> the result
    expect: Callable[[Case, list[Arrays], int], Expected | None]  # None: any result is allowed
    reduces: bool = False
    rooted: bool = False
    same_bits: bool = False  # every rank of a group holds the same bits afterwards
    inplace: str = ""  # the in-place form's signature, if it has one
    outputs: Callable[[Case, int], tuple[str, ...]] = lambda case, r: ()  # the arrays fn may write


# -- the reference: NumPy's reduction --------------------------------------------------------------
def reference(op: str, parts: list[np.ndarray]) -> np.ndarray:
    """``op`` over ``parts`` in rank order, in their dtype: exact where the op is, float64 sums otherwise."""
    first = parts[0]
    if len(parts) == 1:
        return first.copy()  # one rank: x itself, whatever the op (MPI's logical ops included)
    if op in ("maxloc", "minloc"):
        acc = first.copy()
        for x in parts[1:]:
            OPS[op](acc, x, out=acc)
        return acc
    stacked = np.stack(parts)
    if op in LOGICAL[:3]:
        return OPS[op].reduce(stacked, axis=0).astype(first.dtype)
    if first.dtype.kind in "fc" and op in ("sum", "prod"):
        wide = np.complex128 if first.dtype.kind == "c" else np.float64
        return OPS[op].reduce(stacked.astype(wide), axis=0).astype(first.dtype)  # rounded once, at the end
    return OPS[op].reduce(stacked, axis=0, dtype=first.dtype)


def wrong(got: np.ndarray, want: Expected, op: str | None) -> np.ndarray:
    """Boolean mask of the elements of ``got`` that are not the answer (same shape as want.value)."""
    value = want.value
    if op is None:  # moved, not computed: bit for bit (-0.0 is not +0.0, a NaN keeps its payload)
        return (_bits(got) != _bits(value)).any(axis=-1)
    if want.parts is None or op not in ("sum", "prod") or value.dtype.kind not in "fc":
        if value.dtype.names is not None or value.dtype.kind not in "fc":
            return got != value
        return ~((got == value) | (np.isnan(got) & np.isnan(value)))
    parts = np.stack(want.parts).astype(np.complex128)
    eps, tiny = np.finfo(want.parts[0].dtype).eps, np.finfo(want.parts[0].dtype).tiny
    scale = np.abs(parts).sum(axis=0) if op == "sum" else np.abs(value)
    err = np.abs(got.astype(np.complex128) - value.astype(np.complex128))
    return ~(err <= 2 * len(want.parts) * eps * scale + tiny)


def _bits(x: np.ndarray) -> np.ndarray:
    """Each element's bytes, as a row of uint8 ([n, itemsize])."""
    return np.ascontiguousarray(x).view(np.uint8).reshape(x.size, x.dtype.itemsize)


# -- the arrays each rank brings -----------------------------------------------------------------------
def data(case: Case, w: int, count: int, salt: int = 0) -> np.ndarray:
    return rank_data(case.seed + salt, w, (count,), case.dtype, case.op, case.values)


def counts(case: Case, q: int) -> list[int]:
    """The v-variants' per-rank counts, each in [0, n], the same on every rank."""
    return [int(c) for c in np.random.default_rng([case.seed, 7919, q]).integers(0, case.n, q, endpoint=True)]


def matrix(case: Case, q: int) -> np.ndarray:
    """alltoallv's counts: [i, j] elements go from rank i to rank j, each in [0, n]."""
    return np.random.default_rng([case.seed, 7927, q]).integers(0, case.n, (q, q), endpoint=True)


def own(case: Case, q: int, r: int, w: int) -> Arrays:
    return {"x": data(case, w, case.n)}


def reduced(case: Case, xs: list[Arrays], lo: int = 0, hi: int | None = None) -> Expected:
    parts = [a["x"] for a in xs[lo:hi]]
    return Expected(reference(case.op or "sum", parts), parts)


def sliced(e: Expected, b: list[int], r: int) -> Expected:
    parts = None if e.parts is None else [x[b[r] : b[r + 1]] for x in e.parts]
    return Expected(e.value[b[r] : b[r + 1]], parts)


def concat(xs: list[Arrays]) -> Expected:
    return Expected(np.concatenate([a["x"] for a in xs]))


def _allreduce(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
    if case.inplace:
        fn(comm, a["x"], f)
        return a["x"]
    return fn(comm, a["x"], f)


def _broadcast(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
    result = fn(comm, a["x"], case.root % q)
    if getattr(fn, "returns_result", False) and isinstance(result, np.ndarray):
        return result  # a course's broadcast that returns the root's array (roles.adapt)
    return a["x"]


def _allgather_make(case: Case, q: int, r: int, w: int) -> Arrays:
    x = data(case, w, case.n)
    if not case.inplace:
        return {"x": x}
    buf = data(case, w, q * case.n, salt=1)  # garbage to be overwritten, but for the caller's own block
    buf[r * case.n : (r + 1) * case.n] = x
    return {"x": x, "buf": buf}


def _allgather(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
    if not case.inplace:
        return fn(comm, a["x"])
    fn(comm, a["buf"], [i * case.n for i in range(q + 1)])
    return a["buf"]


def _scatter_make(case: Case, q: int, r: int, w: int) -> Arrays:
    x = data(case, w, q * case.n) if r == case.root % q else None
    return {"x": x, "out": data(case, w, case.n, salt=1)}  # out: garbage, to be overwritten


def _scatterv_make(case: Case, q: int, r: int, w: int) -> Arrays:
    x = data(case, w, sum(counts(case, q))) if r == case.root % q else None
    return {"x": x, "out": data(case, w, counts(case, q)[r], salt=1)}


def _scatter(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
    if case.collective == "scatterv":
        fn(comm, a["x"], a["out"], bounds_of(counts(case, q)), case.root % q)
    else:
        fn(comm, a["x"], a["out"], case.root % q)
    return a["out"]


def _alltoallv_make(case: Case, q: int, r: int, w: int) -> Arrays:
    return {"x": data(case, w, int(matrix(case, q)[r].sum()))}


def _alltoallv(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
    c = matrix(case, q)
    return fn(comm, a["x"], bounds_of(c[r].tolist()), bounds_of(c[:, r].tolist()))


def _alltoallv_expect(case: Case, xs: list[Arrays], r: int) -> Expected:
    c = matrix(case, len(xs))
    sb = [bounds_of(row.tolist()) for row in c]  # rank j's send offsets
    return Expected(np.concatenate([a["x"][sb[j][r] : sb[j][r + 1]] for j, a in enumerate(xs)]))


def _root(case: Case, xs: list[Arrays]) -> int:
    return case.root % len(xs)


def _vmake(case: Case, q: int, r: int, w: int) -> Arrays:
    return {"x": data(case, w, counts(case, q)[r])}


def _vtotal(case: Case, q: int, r: int, w: int) -> Arrays:
    return {"x": data(case, w, sum(counts(case, q)))}


def _on_root(case: Case, xs: list[Arrays], r: int, e: Callable[[], Expected]) -> Expected | None:
    return e() if r == _root(case, xs) else None


def _writes_buffer(case: Case, r: int) -> tuple[str, ...]:
    return ("x",) if case.inplace else ()


def _calls(*extra: str) -> Callable[..., Any]:
    """The call ``fn(comm, x, *extra)``, each extra one of f (the ufunc), root, b (the v-collectives' offsets)."""

    def call(fn: Any, comm: Any, a: Arrays, case: Case, q: int, r: int, f: Any) -> Any:
        given = {"f": f, "root": case.root % q}
        if "b" in extra:
            given["b"] = bounds_of(counts(case, q))
        return fn(comm, a["x"], *[given[name] for name in extra])

    return call


# -- each collective's answer for rank r of a group whose arrays are xs -------------------------------
def _all_reduced(case: Case, xs: list[Arrays], r: int) -> Expected:
    return reduced(case, xs)


def _reduced_on_root(case: Case, xs: list[Arrays], r: int) -> Expected | None:
    return _on_root(case, xs, r, lambda: reduced(case, xs))


def _roots_buffer(case: Case, xs: list[Arrays], r: int) -> Expected:
    return Expected(xs[_root(case, xs)]["x"])


def _block_of_reduced(case: Case, xs: list[Arrays], r: int) -> Expected:
    return sliced(reduced(case, xs), block_bounds(case.n, len(xs)), r)


def _vblock_of_reduced(case: Case, xs: list[Arrays], r: int) -> Expected:
    return sliced(reduced(case, xs), bounds_of(counts(case, len(xs))), r)


def _all_concat(case: Case, xs: list[Arrays], r: int) -> Expected:
    return concat(xs)


def _concat_on_root(case: Case, xs: list[Arrays], r: int) -> Expected | None:
    return _on_root(case, xs, r, lambda: concat(xs))


def _block_of_roots(case: Case, xs: list[Arrays], r: int) -> Expected:
    return Expected(xs[_root(case, xs)]["x"][r * case.n : (r + 1) * case.n])


def _vblock_of_roots(case: Case, xs: list[Arrays], r: int) -> Expected:
    return sliced(Expected(xs[_root(case, xs)]["x"]), bounds_of(counts(case, len(xs))), r)


def _blocks_for_me(case: Case, xs: list[Arrays], r: int) -> Expected:
    return Expected(np.concatenate([a["x"][r * case.n : (r + 1) * case.n] for a in xs]))


def _prefix(case: Case, xs: list[Arrays], r: int) -> Expected:
    return reduced(case, xs, 0, r + 1)


def _exclusive_prefix(case: Case, xs: list[Arrays], r: int) -> Expected | None:
    return reduced(case, xs, 0, r) if r > 0 else None  # rank 0: MPI leaves it undefined


def _blocks_to_all(case: Case, q: int, r: int, w: int) -> Arrays:
    return {"x": data(case, w, q * case.n)}


def _writes(*names: str) -> Callable[[Case, int], tuple[str, ...]]:
    return lambda case, r: names


def _table() -> dict[str, Collective]:
    specs = [
        Collective("allreduce", "fn(comm, x, f)", own, _allreduce, _all_reduced, reduces=True, same_bits=True,
                   inplace="fn(comm, buf, f)", outputs=_writes_buffer),
        Collective("reduce", "fn(comm, x, f, root)", own, _calls("f", "root"), _reduced_on_root, reduces=True,
                   rooted=True),
        Collective("broadcast", "fn(comm, buf, root)", own, _broadcast, _roots_buffer, rooted=True, same_bits=True,
                   outputs=_writes("x")),  # the root's buf is checked apart: it must not change
        Collective("reduce_scatter", "fn(comm, x, f)", own, _calls("f"), _block_of_reduced, reduces=True),
        Collective("reduce_scatterv", "fn(comm, x, f, b)", _vtotal, _calls("f", "b"), _vblock_of_reduced,
                   reduces=True),
        Collective("allgather", "fn(comm, x)", _allgather_make, _allgather, _all_concat, same_bits=True,
                   inplace="fn(comm, buf, b)", outputs=_writes("buf")),
        Collective("allgatherv", "fn(comm, x, b)", _vmake, _calls("b"), _all_concat, same_bits=True),
        Collective("gather", "fn(comm, x, root)", own, _calls("root"), _concat_on_root, rooted=True),
        Collective("gatherv", "fn(comm, x, b, root)", _vmake, _calls("b", "root"), _concat_on_root, rooted=True),
        Collective("scatter", "fn(comm, x, out, root)", _scatter_make, _scatter, _block_of_roots, rooted=True,
                   outputs=_writes("out")),
        Collective("scatterv", "fn(comm, x, out, b, root)", _scatterv_make, _scatter, _vblock_of_roots, rooted=True,
                   outputs=_writes("out")),
        Collective("alltoall", "fn(comm, x)", _blocks_to_all, _calls(), _blocks_for_me),
        Collective("alltoallv", "fn(comm, x, sb, rb)", _alltoallv_make, _alltoallv, _alltoallv_expect),
        Collective("scan", "fn(comm, x, f)", own, _calls("f"), _prefix, reduces=True),
        Collective("exscan", "fn(comm, x, f)", own, _calls("f"), _exclusive_prefix, reduces=True),
    ]  # fmt: skip
    return {s.name: s for s in specs}


COLLECTIVES: dict[str, Collective] = _table()


def make_arrays(case: Case, members: list[int]) -> list[Arrays]:
    """Every rank's arrays of one group (group-rank order), with ``np_dtype(case.dtype)``."""
    spec, q = COLLECTIVES[case.collective], len(members)
    return [spec.make(case, q, r, w) for r, w in enumerate(members)]


__all__ = ["COLLECTIVES", "Collective", "Expected", "make_arrays", "reference", "wrong"]
