"""A course's signature: ``--signature send,recv,comm,op`` names the user's positional parameters by role.

The kit calls a collective with its own signature (spec.py: ``fn(comm, x, f)`` for allreduce, ...).
A course fixes another order and other conventions, and a student's file follows the course, so
the kit adapts to it instead of asking for an adapter, which would decide verdicts itself:

    comm                 the communicator
    x, send, sendbuf     the input (for broadcast and the in-place forms: the buffer)
    buf                  the buffer of broadcast and the in-place forms
    recv, recvbuf        an output buffer the kit allocates zero-filled, in the result's shape and dtype,
                         and reads the verdict from after the call (the return value is then ignored)
    f                    a NumPy ufunc, called f(a, b, out=c)
    op                   a plain Python function of two arrays that returns the combined array
    mpiop                the same object as op: MPI's own (MPI.SUM, MPI.MAX, ...), callable as op(a, b) as
                         mpi4py's are, with Reduce_local; so a course may pass either
    root                 the root rank (rooted collectives)
    b                    block offsets of the v-collectives (block r is elements b[r]:b[r+1])
    counts               the same as per-rank counts (b[r+1] - b[r])
    out                  scatter's output buffer
    sb, rb               alltoallv's send and receive offsets

Without an op role a reduction is checked with one op only (the contract's, default sum); without
a root role a rooted collective is checked with root 0. The default signature is the kit's own.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from collectives.common import block_bounds
from collectives.kit.cases import Case
from collectives.kit.spec import COLLECTIVES, counts, matrix

ALIASES = {"send": "x", "sendbuf": "x", "recvbuf": "recv"}
ROLES = ("comm", "x", "buf", "recv", "f", "op", "mpiop", "root", "b", "counts", "out", "sb", "rb")
OP_ROLES = ("f", "op", "mpiop")


class Roles(tuple):
    """The canonical roles, remembering the words the user gave them (``text``) for the report."""

    text: str = ""
    words: dict[str, str] = {}  # noqa: RUF012  (set per instance: the user's word for each canonical role)


def internal(collective: str, inplace: bool = False) -> list[str]:
    """The kit's own parameter names for ``collective``: 'fn(comm, x, f, root)' -> [comm, x, f, root]."""
    spec = COLLECTIVES[collective]
    text = spec.inplace if inplace else spec.signature
    return [name.strip() for name in text[text.index("(") + 1 : text.rindex(")")].split(",")]


def parse(text: str | Sequence[str] | None, collective: str, inplace: bool = False) -> tuple[str, ...] | None:
    """The canonical roles of ``text`` ('send,recv,comm,op'), checked against the collective; None: the default.

    Raises ValueError naming the role that is unknown, repeated, missing or does not fit.
    """
    if text is None or text == "":
        return None
    if isinstance(text, Roles):
        return text
    names = [r.strip() for r in (text.split(",") if isinstance(text, str) else text)]
    roles = [ALIASES.get(r, r) for r in names]
    mine = internal(collective, inplace)
    data = "buf" if "buf" in mine else "x"
    roles = [data if r in ("x", "buf") else r for r in roles]
    unknown = [n for n, r in zip(names, roles) if r not in ROLES]
    if unknown:
        raise ValueError(f"--signature: unknown role {unknown[0]!r}: roles are {', '.join(ROLES)} (and aliases)")
    twice = sorted({r for r in roles if roles.count(r) > 1})
    if twice or sum(r in OP_ROLES for r in roles) > 1:
        raise ValueError(f"--signature: role {(twice or ['op'])[0]!r} given twice ({text})")
    fits = set(mine) | {"recv", "counts", "op", "mpiop"}
    if "recv" in roles and (data == "buf" or "out" in mine):
        fits.discard("recv")
    if "counts" in roles and "b" not in mine:
        fits.discard("counts")
    if not COLLECTIVES[collective].reduces:
        fits -= {"f", "op", "mpiop"}
    wrong = [n for n, r in zip(names, roles) if r not in fits]
    if wrong:
        raise ValueError(f"--signature: {collective} has no {wrong[0]!r} (it takes {', '.join(mine)})")
    missing = [r for r in ("comm", data, "out", "b", "sb", "rb") if r in mine and r not in roles]
    if "b" in missing and "counts" in roles:
        missing.remove("b")
    if missing:
        raise ValueError(f"--signature: {collective} needs a {missing[0]!r} role ({', '.join(mine)})")
    parsed = Roles(roles)
    parsed.text, parsed.words = ", ".join(names), dict(zip(roles, names))
    return parsed


def recv_size(case: Case, q: int, r: int) -> int:
    """Elements of rank r's result (the recv buffer the kit allocates)."""
    name, n = case.collective, case.n
    if name in ("allgather", "gather", "alltoall"):
        return q * n
    if name == "reduce_scatter":
        b = block_bounds(n, q)
        return b[r + 1] - b[r]
    if name == "reduce_scatterv":
        return counts(case, q)[r]
    if name in ("allgatherv", "gatherv"):
        return sum(counts(case, q))
    if name == "alltoallv":
        return int(matrix(case, q)[:, r].sum())
    return n


OFF_ROOT_FILL = 0xA5  # the bytes of a recv buffer off the root: the caller's, which the function must leave alone


def adapt(
    fn: Callable[..., Any], roles: tuple[str, ...], case: Case, q: int, r: int, mpi_op: Any = None
) -> Callable[..., Any]:
    """A function with the kit's signature that calls ``fn`` in the user's order.

    ``op`` and ``mpiop`` are the same object: MPI's op (the rank's MPI.SUM, ...), callable as op(a, b)
    as a course's plain function is, with MPI.Op's methods (Reduce_local) for a course that passes those.
    With a ``recv`` role it returns the recv buffer; off the root of a reduce or gather, None if the
    function left recv alone and the buffer if it wrote there. A broadcast that returns an array is
    judged by what it returns."""
    names = internal(case.collective, case.inplace)
    off_root = COLLECTIVES[case.collective].rooted and case.collective != "broadcast" and r != case.root % q

    def kit_fn(*args: Any) -> Any:
        given = dict(zip(names, args))
        if "b" in given:
            given["counts"] = np.diff(np.asarray(given["b"])).tolist()
        f = given.get("f")
        given["op"] = given["mpiop"] = mpi_op if mpi_op is not None else ((lambda a, b: f(a, b)) if f else None)
        if "recv" in roles:
            data = given.get("x")
            dtype = data.dtype if isinstance(data, np.ndarray) else np.float64
            given["recv"] = np.zeros(recv_size(case, q, r), dtype)
            if off_root:
                given["recv"].view(np.uint8)[:] = OFF_ROOT_FILL
        result = fn(*[given[role] for role in roles])
        if "recv" not in roles:
            return result if case.collective != "broadcast" or not isinstance(result, np.ndarray) else result
        if off_root:
            return None if (given["recv"].view(np.uint8) == OFF_ROOT_FILL).all() else given["recv"]
        return given["recv"]

    kit_fn.__qualname__ = getattr(fn, "__qualname__", "fn")
    kit_fn.returns_result = case.collective == "broadcast"  # type: ignore[attr-defined]
    return kit_fn


def describe(roles: tuple[str, ...] | None) -> str:
    return "fn(" + ", ".join(roles) + ")" if roles else ""


def contract_ops(roles: tuple[str, ...] | None) -> bool:
    """Whether the signature passes an op at all (without one a reduction is checked with one op)."""
    return roles is None or any(r in roles for r in OP_ROLES)


__all__ = ["ROLES", "adapt", "contract_ops", "describe", "internal", "parse", "recv_size"]
