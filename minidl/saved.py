"""Version counters: backward refuses values that were changed in place after an op saved them.

An op's backward reads what its forward saved (``Mul`` saves both factors). If the memory behind a saved array is
overwritten before backward runs (``w.data[...] = 100``, or ``opt.step()`` between a forward and its backward),
the gradient is silently wrong. PyTorch guards against this with a version counter per tensor; minidl keeps one
per block of memory, because a saved array is often a view of a tensor's data (``x @ w.T`` saves a view of w):

* when a recorded op saves arrays, each array's memory owner (the array at the end of its ``.base`` chain) is
  *held*, with the version it had then (``hold``);
* while memory is held, ``Tensor.data`` returns a ``SavedArray``: a read-only view whose in-place writes written
  in Python (``a[...] = v``, ``a -= v``, ``np.add(a, 1, out=a)``) bump the memory's version and then go through,
  and whose other writes (``np.copyto``, a buffer handed to MPI) fail loudly with NumPy's read-only error;
* backward compares every version its Function saved with the current one and raises, naming the op, when they
  differ (``check``); freeing the graph (after backward, or when it is garbage-collected) releases the memory.

Nothing is checked, and ``.data`` is the plain array, while no recorded graph holds the memory (under no_grad,
in evaluation, after backward): training pays one dictionary update per saved array. The one write this cannot
see is through a raw ``.data`` reference taken *before* the forward: fetch ``.data`` where you write.
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

# id(memory owner) -> [number of live Functions holding it, version]. The owner stays alive while held (the saved
# arrays keep it), so its id cannot be reused meanwhile. One lock: simulated ranks are threads of one process.
_held: dict[int, list[int]] = {}
_lock = threading.Lock()


def memory_owner(a: np.ndarray) -> Any:
    """The object owning ``a``'s memory: NumPy collapses views of views, so at most a short ``.base`` chain."""
    while isinstance(a, np.ndarray) and a.base is not None:
        a = a.base
    return a


def version_of(a: np.ndarray) -> int | None:
    """The version of ``a``'s memory while some recorded op holds it, else None."""
    entry = _held.get(id(memory_owner(a))) if _held else None
    return None if entry is None else entry[1]


def hold(arrays: tuple[Any, ...]) -> tuple[tuple[int, int], ...]:
    """Hold the memory of the saved ndarrays; returns (owner id, version) pairs for ``check`` and ``release``."""
    owners = {id(memory_owner(a)) for a in arrays if isinstance(a, np.ndarray)}
    pairs = []
    with _lock:
        for oid in owners:
            entry = _held.setdefault(oid, [0, 0])
            entry[0] += 1
            pairs.append((oid, entry[1]))
    return tuple(pairs)


def release(pairs: tuple[tuple[int, int], ...]) -> None:
    with _lock:
        for oid, _ in pairs:
            entry = _held.get(oid)
            if entry is not None:
                entry[0] -= 1
                if entry[0] <= 0:
                    del _held[oid]


def modified(pairs: tuple[tuple[int, int], ...]) -> tuple[int, int, int] | None:
    """The first held (owner id, saved version, current version) whose version changed, else None."""
    for oid, version in pairs:
        entry = _held.get(oid)
        if entry is not None and entry[1] != version:
            return oid, version, entry[1]
    return None


def bump(a: np.ndarray) -> None:
    """Record an in-place write to ``a``'s memory (a no-op unless a recorded op holds it)."""
    if _held:
        entry = _held.get(id(memory_owner(a)))
        if entry is not None:
            entry[1] += 1


def writable(a: np.ndarray) -> np.ndarray:
    """A plain, writeable view of a SavedArray's memory (the memory itself is writeable: only the view is not)."""
    v = a.view(np.ndarray)
    v.flags.writeable = True
    return v


class SavedArray(np.ndarray):
    """What ``Tensor.data`` returns while a recorded op holds the tensor's memory for its backward.

    Reads and arithmetic work as on any ndarray (results are plain ndarrays). Writes through ``[]=``, augmented
    assignment or a ufunc's ``out=`` count as in-place modifications: the memory's version goes up, and a
    backward that needs the old values raises. The view itself is read-only, so any other write fails loudly.
    """

    tracked: bool = False  # a view of held memory (not a fresh array made from one, like np.empty_like's)
    whole: Any = None  # the tensor array this view shows in full (so ``t.data -= x`` keeps t's array)

    @staticmethod
    def of(data: np.ndarray) -> SavedArray:
        view = data.view(SavedArray)
        view.flags.writeable = False
        view.tracked, view.whole = True, data
        return view

    def __array_finalize__(self, obj: Any) -> None:
        self.tracked = bool(getattr(obj, "tracked", False)) and not self.flags.owndata
        self.whole = None

    def __setitem__(self, key: Any, value: Any) -> None:
        if not self.tracked:
            return super().__setitem__(key, value)
        bump(self)
        writable(self)[key] = value

    def __array_ufunc__(self, ufunc: np.ufunc, method: str, *inputs: Any, **kwargs: Any) -> Any:
        plain = tuple(x.view(np.ndarray) if isinstance(x, SavedArray) else x for x in inputs)
        out = kwargs.get("out")
        if out is not None:
            for o in out:
                if isinstance(o, SavedArray) and o.tracked:
                    bump(o)
            kwargs["out"] = tuple(
                (writable(o) if o.tracked else o.view(np.ndarray)) if isinstance(o, SavedArray) else o for o in out
            )
        result = getattr(ufunc, method)(*plain, **kwargs)
        if out is not None:  # in place: hand back the arrays written, as NumPy does (``t.data -= x`` assigns it)
            return out[0] if len(out) == 1 else out
        return result
