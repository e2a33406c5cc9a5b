"""Checkpoints without pickle: ``save(obj, path)`` / ``load(path)`` through one NumPy .npz archive.

``obj`` is a tree of dicts (str or int keys), lists and tuples whose leaves are ndarrays, Tensors
(saved as their ``.data``), Python bool/int/float/str, NumPy scalars and None. Each non-None leaf
becomes one array in the archive, named by its path with ``/`` between the levels::

    {"model": {"fc.weight": W}, "optimizer": {"state": {0: {"step": 3}}}, "epoch": 7}
    -> entries "model/fc.weight", "optimizer/state/0/step", "epoch"

so ``np.load(path)`` shows a readable table. ``/`` is the separator because no parameter name
(Python identifiers joined by dots) contains one; a dict key that contains ``/`` is refused.
One more entry, ``__minidl_manifest__`` (UTF-8 JSON as uint8 bytes), records the tree: container
kinds, key types (int keys come back as int) and leaf types (a float comes back a Python float,
a str a str, a tuple a tuple). Everything is written and read with ``allow_pickle=False``; object
arrays are refused both ways. A .npz without a manifest (e.g. from ``np.savez``) loads as a flat
dict name -> ndarray.

The write is atomic: the archive goes to a temporary file in the same directory, which then
replaces ``path`` (``os.replace``), so a crash never leaves a half-written checkpoint; a write
that fails (disk full, no such directory) removes the temporary file and names ``path``.
Loading checks every size the file declares before allocating (``minidl.safe_npz``). The file is
written at exactly ``path`` (no ``.npz`` is appended).
"""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import numpy as np

from minidl.safe_npz import DEFAULT_MAX_DECOMPRESSED, CheckpointError, read_npz
from minidl.tensor import Tensor

SEPARATOR = "/"
MANIFEST = "__minidl_manifest__"
FORMAT = "minidl.checkpoint"
VERSION = 1


# ----------------------------------------------------------------------------- save
def save(obj: Any, path: str | os.PathLike[str], compress: bool = False) -> None:
    """Write ``obj`` (see the module doc) to ``path`` as an .npz archive, atomically.

    ``compress=True`` deflates the arrays (smaller, slower). Raises TypeError naming the path of
    an unsupported leaf (e.g. an object array or an arbitrary class) and ValueError for a key
    containing ``/`` or two keys that would collide (``0`` and ``"0"`` in one dict).
    """
    arrays: dict[str, np.ndarray] = {}
    tree = _flatten(obj, [], arrays)
    manifest = json.dumps({"format": FORMAT, "version": VERSION, "tree": tree})
    arrays[MANIFEST] = np.frombuffer(manifest.encode("utf-8"), dtype=np.uint8)

    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=".npz", dir=directory)
        with os.fdopen(fd, "wb") as f:
            (np.savez_compressed if compress else np.savez)(f, allow_pickle=False, **arrays)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException as e:
        if tmp is not None and os.path.exists(tmp):
            os.remove(tmp)
        if isinstance(e, OSError):  # name the user's path, not the temporary file's
            raise type(e)(e.errno, f"save: cannot write {path!r}: {e.strerror or e}") from None
        raise


def _flatten(obj: Any, path: list[str], arrays: dict[str, np.ndarray]) -> dict[str, Any]:
    """Collect the leaves of ``obj`` into ``arrays`` (entry name -> ndarray); return its manifest node."""
    where = SEPARATOR.join(path) or "<root>"
    if isinstance(obj, dict):
        items, names = [], set()
        for key, value in obj.items():
            if isinstance(key, bool) or not isinstance(key, (str, int)):
                raise TypeError(f"save: dict keys must be str or int, got {type(key).__name__} {key!r} at {where}")
            name = str(key)
            if SEPARATOR in name or "\0" in name:  # "\0": zip entry names end at a NUL, so it would not load
                bad = SEPARATOR if SEPARATOR in name else "\0"
                raise ValueError(f"save: key {name!r} at {where} contains the character {bad!r}")
            if name in names:
                raise ValueError(f"save: keys at {where} collide when written as text: {name!r}")
            names.add(name)
            kind = "int" if isinstance(key, int) else "str"
            items.append([name, kind, _flatten(value, path + [name], arrays)])
        return {"type": "dict", "items": items}
    if isinstance(obj, (list, tuple)):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {"type": kind, "items": [_flatten(v, path + [str(i)], arrays) for i, v in enumerate(obj)]}
    if obj is None:
        return {"type": "none"}

    entry = SEPARATOR.join(path) or "root"
    if entry == MANIFEST:
        raise ValueError(f"save: the name {MANIFEST!r} is reserved")
    if isinstance(obj, Tensor):
        obj = obj.data
    if isinstance(obj, bool):  # before int: bool is a subclass of int
        kind, arr = "bool", np.array(obj)
    elif isinstance(obj, int):
        if not -(2**63) <= obj < 2**63:
            raise ValueError(f"save: integer at {where} does not fit in int64: {obj}")
        kind, arr = "int", np.array(obj, dtype=np.int64)
    elif isinstance(obj, float):
        kind, arr = "float", np.array(obj, dtype=np.float64)
    elif isinstance(obj, str):
        if "\0" in obj:  # NumPy's str_ arrays drop trailing NULs: the string would not come back intact
            raise ValueError(f"save: the string at {where} contains a NUL character, which .npz cannot keep")
        kind, arr = "str", np.array(obj, dtype=np.str_)
    elif isinstance(obj, np.generic):
        kind, arr = "numpy_scalar", np.array(obj)
    elif isinstance(obj, np.ndarray):
        kind, arr = "ndarray", obj
    else:
        raise TypeError(
            f"save: unsupported type {type(obj).__name__} at {where}; use ndarrays, numbers, str, bool, None, "
            "and dicts/lists/tuples of them"
        )
    if arr.dtype.hasobject:
        raise TypeError(f"save: object arrays cannot be saved without pickle (at {where})")
    arrays[entry] = arr
    return {"type": kind, "entry": entry}


# ----------------------------------------------------------------------------- load
MAX_DEPTH = 64  # nesting a manifest may describe (a deeper one is malformed, not a RecursionError)


def load(path: str | os.PathLike[str], max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> Any:
    """Read a checkpoint written by ``save``; return the same tree (arrays as ndarrays, numbers as numbers).

    Raises FileNotFoundError for a missing file and ``CheckpointError`` (a ValueError) naming the file
    and the entry for anything else: not an .npz archive, truncated or corrupt, pickled/object data,
    sizes declared beyond the file (or inflating beyond ``max_decompressed`` bytes), a bad manifest.
    No array is allocated before its declared size has been checked (see ``minidl.safe_npz``).
    """
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"load: no checkpoint at {path!r}")
    with open(path, "rb") as f:
        magic = f.read(6)
    if magic == b"\x93NUMPY":
        raise CheckpointError(f"load: {path!r} is a single .npy array, not an .npz checkpoint")
    if not magic.startswith(b"PK"):  # anything else np.load would take for a pickle
        raise CheckpointError(
            f"load: {path!r} is not an .npz checkpoint (it does not start with a zip header, got {magic!r})"
        )
    arrays = read_npz(path, max_decompressed)
    if MANIFEST not in arrays:
        return arrays
    manifest = _read_manifest(arrays.pop(MANIFEST), path)
    try:
        return _unflatten(manifest["tree"], arrays, [], path)
    except RecursionError:
        raise CheckpointError(f"load: {path!r}: manifest nested too deeply") from None


def _read_manifest(raw: np.ndarray, path: str) -> dict[str, Any]:
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise CheckpointError(f"load: {path!r}: entry {MANIFEST!r} is {raw.dtype} {raw.shape}, not UTF-8 bytes")
    try:
        manifest = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
        raise CheckpointError(f"load: {path!r} has an unreadable manifest ({type(e).__name__}: {e})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or "tree" not in manifest:
        raise CheckpointError(f"load: {path!r} has a manifest that is not a {FORMAT} manifest")
    version = manifest.get("version", 0)
    if not isinstance(version, int) or version > VERSION:
        raise CheckpointError(f"load: {path!r} is format version {version!r}; this minidl reads <= {VERSION}")
    return manifest


_SCALARS = {"bool": bool, "int": int, "float": float, "str": str}


def _unflatten(node: Any, arrays: dict[str, np.ndarray], where: list[str], path: str) -> Any:
    """Rebuild the object a manifest node describes, taking leaves from ``arrays``; ``where``: the keys so far."""

    def fail(problem: str) -> CheckpointError:
        return CheckpointError(f"load: {path!r}: key {SEPARATOR.join(where) or '<root>'!r}: {problem}")

    if len(where) > MAX_DEPTH:
        raise fail(f"manifest nested deeper than {MAX_DEPTH} levels")
    kind = node.get("type") if isinstance(node, dict) else None
    if kind in ("dict", "list", "tuple") and not isinstance(node.get("items"), list):
        raise fail(f"manifest {kind} has no list of items")
    if kind == "dict":
        out = {}
        for item in node["items"]:
            if not (isinstance(item, list) and len(item) == 3 and isinstance(item[0], str)):
                raise fail(f"malformed manifest item {str(item)[:80]}")
            name, key_type, child = item
            if key_type not in ("int", "str") or (key_type == "int" and not _is_int(name)):
                raise fail(f"malformed manifest key {name!r} of type {key_type!r}")
            out[int(name) if key_type == "int" else name] = _unflatten(child, arrays, where + [name], path)
        return out
    if kind in ("list", "tuple"):
        items = [_unflatten(v, arrays, where + [str(i)], path) for i, v in enumerate(node["items"])]
        return tuple(items) if kind == "tuple" else items
    if kind == "none":
        return None
    if kind not in _SCALARS and kind not in ("ndarray", "numpy_scalar"):
        raise fail(f"manifest entry of unknown type {str(kind)[:40]!r}")
    entry = node.get("entry")
    if not isinstance(entry, str) or entry not in arrays:
        raise fail(f"the file lacks the array {entry!r} its manifest lists")
    arr = arrays[entry]
    if kind == "ndarray":
        return arr
    if arr.ndim != 0:
        raise fail(f"entry {entry!r} should be a scalar, has shape {arr.shape}")
    if kind == "numpy_scalar":
        return arr[()]
    if kind == "str" and arr.dtype.kind != "U" or kind != "str" and arr.dtype.kind not in "biuf":
        raise fail(f"entry {entry!r} should hold a {kind}, holds {arr.dtype}")
    return _SCALARS[kind](arr.item())


def _is_int(text: str) -> bool:
    return text.lstrip("-").isdigit() and len(text) < 20
