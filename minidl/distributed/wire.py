"""A state (nested dicts and lists of arrays and numbers) as one byte buffer, and that buffer between ranks.

``encode`` / ``decode`` are the format; ``broadcast_state``, ``send_state`` / ``recv_state``,
``gather_states`` and ``scatter_states`` move trees with buffer-based MPI calls, never pickle.
state.py (every rank starts from rank 0's state), checkpoint.py and fingerprint.py build on them.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm

# ----------------------------------------------------------------------------- the wire format
# A state (nested dicts of arrays and numbers) as one byte buffer, for buffer-based MPI calls.
#
# Optimizer state, checkpoints and per-rank RNG states travel between ranks as a single ``uint8``
# array, so they can go through ``Bcast``/``Send``/``Recv`` like any other buffer, never through
# pickle (which can run code on load). The layout::
#
#     [ header length: 8 bytes, little-endian ][ header: JSON, UTF-8 ][ payload: array bytes, 8-aligned ]
#
# The header is the tree itself with every ndarray replaced by ``{"__array__": [dtype, shape, offset]}``
# into the payload. Dict keys become strings (JSON has no others) and tuples become lists, which is
# what the optimizers' ``load_state_dict`` accepts.
_ARRAY = "__array__"
_ALIGN = 8


def encode(tree: Any) -> np.ndarray:
    """Serialize ``tree`` (dicts, lists, tuples, ndarrays, numbers, strings, bools, None) to bytes."""
    chunks: list[np.ndarray] = []
    offset = 0

    def walk(node: Any, where: str) -> Any:
        nonlocal offset
        if isinstance(node, np.ndarray):
            if node.dtype.kind not in "biufc":
                raise TypeError(f"encode: array at {where or 'top'} has dtype {node.dtype}; only numeric arrays")
            data = np.ascontiguousarray(node).view(np.uint8).reshape(-1)
            ref = {_ARRAY: [node.dtype.str, list(node.shape), offset]}
            chunks.append(data)
            padded = -(-data.size // _ALIGN) * _ALIGN
            if padded > data.size:
                chunks.append(np.zeros(padded - data.size, np.uint8))
            offset += padded
            return ref
        if isinstance(node, dict):
            return {str(k): walk(v, f"{where}.{k}" if where else str(k)) for k, v in node.items()}
        if isinstance(node, (list, tuple)):
            return [walk(v, f"{where}[{i}]") for i, v in enumerate(node)]
        if isinstance(node, np.generic):
            return node.item()
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        raise TypeError(f"encode: cannot send a {type(node).__name__} (at {where or 'top'})")

    header = json.dumps(walk(tree, ""), separators=(",", ":")).encode("utf-8")
    pad = -len(header) % _ALIGN
    head = np.frombuffer(np.array([len(header) + pad], dtype="<u8").tobytes() + header + b" " * pad, np.uint8)
    return np.concatenate([head, *chunks]) if chunks else head.copy()


def decode(buf: np.ndarray) -> Any:
    """The tree ``encode`` made (arrays are fresh copies, not views of ``buf``)."""
    buf = np.asarray(buf, dtype=np.uint8).reshape(-1)
    if buf.size < 8:
        raise ValueError(f"decode: a buffer of {buf.size} bytes is too short to hold a header")
    n = int(buf[:8].view("<u8")[0])
    if 8 + n > buf.size:
        raise ValueError(f"decode: header of {n} bytes does not fit in a buffer of {buf.size} bytes")
    tree = json.loads(buf[8 : 8 + n].tobytes().decode("utf-8"))
    payload = buf[8 + n :]

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            if set(node) == {_ARRAY}:
                dtype, shape, offset = node[_ARRAY]
                dtype = np.dtype(dtype)
                nbytes = dtype.itemsize * int(np.prod(shape, dtype=np.int64))
                return payload[offset : offset + nbytes].view(dtype).reshape(shape).copy()
            return {k: walk(v) for k, v in node.items()}
        if isinstance(node, list):
            return [walk(v) for v in node]
        return node

    return walk(tree)


# ----------------------------------------------------------------------------- broadcast, gather, scatter
_TAG = 7301  # point-to-point tag of gather/scatter of states (clear of the collectives' tags)


def broadcast_buffer(buf: np.ndarray | None, root: int = 0, comm: Any = None) -> np.ndarray:
    """The root's 1-D ``uint8`` buffer on every rank (the others pass None: its size comes along)."""
    import collectives

    comm = get_comm(comm)
    if comm.Get_size() == 1:
        return buf
    return collectives.broadcast(comm, buf if comm.Get_rank() == root else None, root=root)


def broadcast_state(tree: Any, root: int = 0, comm: Any = None) -> Any:
    """The root's ``tree`` (nested dicts/lists of arrays and numbers) on every rank; others may pass None."""
    comm = get_comm(comm)
    if comm.Get_size() == 1:
        return tree
    buf = encode(tree) if comm.Get_rank() == root else None
    return decode(broadcast_buffer(buf, root, comm))


def send_state(tree: Any, dest: int, comm: Any = None) -> None:
    """Send ``tree`` to rank ``dest`` (its length, then its bytes)."""
    comm = get_comm(comm)
    buf = encode(tree)
    comm.Send(np.array([buf.size], dtype=np.int64), dest=dest, tag=_TAG)
    comm.Send(buf, dest=dest, tag=_TAG)


def recv_state(source: int, comm: Any = None) -> Any:
    """Receive the tree rank ``source`` sent with ``send_state``."""
    comm = get_comm(comm)
    n = np.zeros(1, dtype=np.int64)
    comm.Recv(n, source=source, tag=_TAG)
    buf = np.empty(int(n[0]), dtype=np.uint8)
    comm.Recv(buf, source=source, tag=_TAG)
    return decode(buf)


def gather_states(tree: Any, root: int = 0, comm: Any = None) -> list[Any] | None:
    """Every rank's ``tree`` collected on the root (a list indexed by rank); None on the others."""
    comm = get_comm(comm)
    if comm.Get_rank() != root:
        send_state(tree, root, comm)
        return None
    return [tree if r == root else recv_state(r, comm) for r in range(comm.Get_size())]


def scatter_states(trees: list[Any] | None, root: int = 0, comm: Any = None) -> Any:
    """Rank r gets ``trees[r]`` from the root (the inverse of ``gather_states``)."""
    comm = get_comm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    if rank != root:
        return recv_state(root, comm)
    if trees is None or len(trees) != size:
        got = "None" if trees is None else f"{len(trees)} states"
        raise ValueError(f"scatter_states: the root needs one state per rank ({size}), got {got}")
    for r in range(size):
        if r != root:
            send_state(trees[r], r, comm)
    return trees[root]
