"""Do all ranks train the same model with the same optimizer? Compare a fingerprint before the first exchange.

The collectives compare what each call moves (shape, dtype and op of one buffer), not what the
buffer means. Two ranks whose models declare the same parameters in another order, or two
architectures with the same parameter count (``Linear(6,4)+Linear(4,6)`` against
``Linear(4,6)+Linear(6,4)``), pack gradient buffers of the same size: the allreduce agrees and
mixes unrelated gradients in silence. Ranks whose optimizers differ (SGD on one, Adam on another,
another learning rate) never exchange anything that would show it.

So the schemes compare, once before their first exchange, a *layout*: a table of rows

    parameter 0      name 'fc.weight', shape (4, 6), float32
    ...
    optimizer        SGD
    group 0 lr       0.1
    group 0 momentum 0.9

``check_layout(comm, rows, what, settings)`` hashes the table to 64 bits (BLAKE2b) and compares
the hash and the scheme's integer ``settings`` in one agreement handshake named ``what`` (the
collectives' own first round, so a rank in another collective meets it): about log2 p messages of
about a hundred bytes. Only if some hash differs are the full tables gathered, and every rank raises
the same ``MismatchError`` naming the first row that differs and which ranks brought what.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

Row = tuple[str, str]


def parameter_rows(named: Iterable[tuple[str | None, Any]]) -> list[Row]:
    """One row per parameter, in order: its name (when known), shape and dtype."""
    rows = []
    for i, (name, p) in enumerate(named):
        data = getattr(p, "data", p)
        label = f"name {name!r}, " if name is not None else ""
        mark = ", rows exchanged (sparse_grad)" if getattr(p, "sparse_grad", False) else ""
        rows.append((f"parameter {i}", f"{label}shape {tuple(np.shape(data))}, {np.asarray(data).dtype}{mark}"))
    return rows


def optimizer_rows(optimizer: Any) -> list[Row]:
    """The innermost optimizer's class (under DistributedOptimizer / LocalSGD wrappers) and every group's
    hyperparameters with their values."""
    inner = optimizer
    while hasattr(inner, "optimizer"):
        inner = inner.optimizer
    rows = [("optimizer", type(inner).__name__), ("parameter groups", str(len(optimizer.param_groups)))]
    for g, group in enumerate(optimizer.param_groups):
        rows.append((f"group {g} parameters", str(len(group["params"]))))
        rows += [(f"group {g} {k}", _value_text(v)) for k, v in sorted(group.items()) if k != "params"]
    return rows


def _value_text(v: Any) -> str:
    if isinstance(v, float):
        return repr(v)  # exact: 0.1 and 0.1000000001 differ
    if isinstance(v, (list, tuple)):
        return "(" + ", ".join(_value_text(x) for x in v) + ")"
    return repr(v)


def digest(rows: Sequence[Row]) -> int:
    """64 bits of BLAKE2b over the table, as a signed int64."""
    h = hashlib.blake2b(json.dumps(list(rows)).encode("utf-8"), digest_size=8).digest()
    return int(np.frombuffer(h, "<i8")[0])


def check_layout(
    comm: Any,
    rows: Sequence[Row],
    what: str,
    settings: Sequence[tuple[str, int, Any]] = (),
    subject: str = "the model or optimizer",
) -> None:
    """Raise the same MismatchError on every rank unless all ranks bring the same ``rows`` and ``settings``.

    ``settings``: (name, integer code, decode(code) -> text) for scalar settings that must agree
    (an allreduce algorithm, a fusion size, ...); they travel beside the digest in the same round.
    The round is the collectives' agreement handshake, named ``what``: a rank that is in another
    collective meanwhile (the next step of a rank that did not call this, say) meets it there, and
    every rank raises naming both calls. It carries [codes, ~codes] reduced by max, which gives every
    rank max(codes) and ~min(codes) (as agreement.agree_on_counts does); only if they differ is the
    table of every rank's codes gathered, to say who brought what.
    """
    if comm.Get_size() == 1:
        return
    from collectives import MismatchError
    from collectives.agreement import handshake, header_bytes, raise_unless_agreed
    from collectives.algorithms.fold import allgather_blocks
    from collectives.common import TAG_HEADERS

    codes = np.array([code for _, code, _ in settings] + [digest(rows)], dtype=np.int64)
    head = header_bytes(None, None, "", what if len(what) <= 32 else what.rsplit(".", 1)[-1][:32])
    both, agreed = handshake(comm, head, np.concatenate([codes, ~codes]), np.maximum)
    raise_unless_agreed(comm, head, agreed)
    if np.array_equal(both[: len(codes)], ~both[len(codes) :]):
        return
    table = np.zeros((comm.Get_size(), len(codes)), dtype=np.int64)
    table[comm.Get_rank()] = codes
    allgather_blocks(comm, table.reshape(-1), len(codes), tag=TAG_HEADERS)
    differ = [i for i in range(len(settings)) if (table[:, i] != table[0, i]).any()]
    if differ:
        per_rank = "; ".join(
            f"rank {r}: " + ", ".join(f"{settings[i][0]}={settings[i][2](int(row[i]))!r}" for i in differ)
            for r, row in enumerate(table)
        )
        raise MismatchError(f"{what}: ranks disagree on {[settings[i][0] for i in differ]} ({per_rank})")
    if (table[:, -1] != table[0, -1]).any():
        raise MismatchError(f"{what}: ranks disagree on {subject}: {first_difference(comm, rows)}")


def first_difference(comm: Any, rows: Sequence[Row]) -> str:
    """Gather every rank's table (only after a digest differed) and describe its first differing row."""
    from minidl.distributed.wire import broadcast_state, gather_states

    tables = gather_states([list(r) for r in rows], 0, comm)
    text = describe_difference(tables) if comm.Get_rank() == 0 else None
    return broadcast_state(text, 0, comm)  # rank 0's words on every rank: the same error everywhere


def describe_difference(tables: Sequence[Sequence[Sequence[str]]]) -> str:
    """The first row (in order) where the ranks' tables differ, with which ranks brought what."""
    longest = max(len(t) for t in tables)
    for i in range(longest):
        cells = [tuple(t[i]) if i < len(t) else ("(nothing)", "(nothing)") for t in tables]
        if len(set(cells)) > 1:
            groups: dict[tuple[str, str], list[int]] = {}
            for r, cell in enumerate(cells):
                groups.setdefault(cell, []).append(r)
            key = next(c[0] for c in cells if c[0] != "(nothing)")
            brought = "; ".join(f"ranks {ranks}: {key_value(cell, key)}" for cell, ranks in groups.items())
            return f"first difference at {key}: {brought}"
    return "the tables are equal but their digests differ (a hash collision)"


def key_value(cell: tuple[str, str], key: str) -> str:
    if cell[0] == "(nothing)":
        return "no such entry"
    return cell[1] if cell[0] == key else f"{cell[0]} = {cell[1]}"
