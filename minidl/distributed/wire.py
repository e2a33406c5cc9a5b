"""A state (nested dicts of arrays and numbers) as one byte buffer, for buffer-based MPI calls.

Optimizer state, checkpoints and per-rank RNG states travel between ranks as a single ``uint8``
array, so they can go through ``Bcast``/``Send``/``Recv`` like any other buffer, never through
pickle (which can run code on load). The layout::

    [ header length: 8 bytes, little-endian ][ header: JSON, UTF-8 ][ payload: array bytes, 8-aligned ]

The header is the tree itself with every ndarray replaced by ``{"__array__": [dtype, shape, offset]}``
into the payload. Dict keys become strings (JSON has no others) and tuples become lists, which is
what the optimizers' ``load_state_dict`` accepts.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

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
                raise TypeError(f"wire.encode: array at {where or 'top'} has dtype {node.dtype}; only numeric arrays")
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
        raise TypeError(f"wire.encode: cannot send a {type(node).__name__} (at {where or 'top'})")

    header = json.dumps(walk(tree, ""), separators=(",", ":")).encode("utf-8")
    pad = -len(header) % _ALIGN
    head = np.frombuffer(np.array([len(header) + pad], dtype="<u8").tobytes() + header + b" " * pad, np.uint8)
    return np.concatenate([head, *chunks]) if chunks else head.copy()


def decode(buf: np.ndarray) -> Any:
    """The tree ``encode`` made (arrays are fresh copies, not views of ``buf``)."""
    buf = np.asarray(buf, dtype=np.uint8).reshape(-1)
    if buf.size < 8:
        raise ValueError(f"wire.decode: a buffer of {buf.size} bytes is too short to hold a header")
    n = int(buf[:8].view("<u8")[0])
    if 8 + n > buf.size:
        raise ValueError(f"wire.decode: header of {n} bytes does not fit in a buffer of {buf.size} bytes")
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
