"""The user's module as each in-process rank sees it: its own copy, whose ``mpi4py`` is the kit's ranks.

Under mpiexec every rank is a process with its own copy of the student's module: its globals (a
call counter used as a tag, a scratch buffer), and ``from mpi4py import MPI`` bound to that
process's MPI. The kit's in-process ranks are threads of one process, so ``rank_function(fn, w)``
gives each rank the same: the module's file executed again for rank w (``ModuleCopies``), with an
``__import__`` that hands it ``fake_mpi4py(w)`` for ``mpi4py`` and ``mpi4py.MPI``. The fake
``MPI`` namespace (``Namespace``) offers what course code calls beside the communicator:

    COMM_WORLD (the case's world, rebound per case), Request (Waitall, waitall, Waitany, Testall),
    Status, ANY_SOURCE, ANY_TAG, PROC_NULL, IN_PLACE, UNDEFINED, the datatypes (DOUBLE, FLOAT,
    INT, LONG, ...), the ops (SUM, PROD, MAX, MIN, LAND, ... callable as op(a, b), as mpi4py's
    are), Wtime, Get_processor_name, Init/Finalize/Is_initialized, and mpi4py.rc

``COMM_WORLD`` is one object per rank that forwards to the case's world communicator, and a
module copy is kept per (world size, rank), as a process lives through one job.
Any other name of mpi4py's raises ``NotOffered``: the kit reports a usage error naming it, never a
failed property. A function whose module cannot be executed again (one defined inside another
function, or typed at a prompt) runs on a shallow copy of its globals instead, with ``MPI`` swapped
for the rank's namespace; mutable globals are then shared by the ranks, and ``shared_note`` says so.
"""

from __future__ import annotations

import builtins
import importlib.util
import itertools
import os
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from collectives.common import OPS
from collectives.inprocess import ANY_SOURCE, ANY_TAG, PROC_NULL, NotOffered, Request, Status, _missing


class Datatype:
    """An MPI datatype as a buffer spec names it: its size in bytes and the NumPy dtype it stands for."""

    def __init__(self, name: str, dtype: str):
        self.name, self.dtype = name, np.dtype(dtype)
        self.size = self.extent = self.dtype.itemsize

    def Get_size(self) -> int:
        return self.size

    def __repr__(self) -> str:
        return f"MPI.{self.name}"


class Op:
    """An MPI predefined op: ``op(a, b)`` combines two arrays, as mpi4py's ``MPI.Op.__call__`` does."""

    def __init__(self, name: str, key: str):
        self.name, self.key = name, key

    @property
    def ufunc(self) -> Any:
        return OPS[self.key]

    def __call__(self, a: Any, b: Any) -> Any:
        return self.ufunc(a, b)

    def Reduce_local(self, inbuf: Any, inoutbuf: Any) -> None:
        """inoutbuf = inbuf op inoutbuf, as MPI_Reduce_local."""
        a, b = (x[0] if isinstance(x, (list, tuple)) else x for x in (inbuf, inoutbuf))
        self.ufunc(a, b, out=b)

    def Is_commutative(self) -> bool:
        return True

    def Free(self) -> None:
        pass

    def __repr__(self) -> str:
        return f"MPI.{self.name}"


DATATYPES = {
    "DOUBLE": "float64", "FLOAT": "float32", "INT": "int32", "LONG": "int64", "LONG_LONG": "int64",
    "SHORT": "int16", "CHAR": "int8", "SIGNED_CHAR": "int8", "UNSIGNED_CHAR": "uint8", "BYTE": "uint8",
    "UNSIGNED": "uint32", "UNSIGNED_SHORT": "uint16", "UNSIGNED_LONG": "uint64", "INT8_T": "int8",
    "INT16_T": "int16", "INT32_T": "int32", "INT64_T": "int64", "UINT8_T": "uint8", "UINT16_T": "uint16",
    "UINT32_T": "uint32", "UINT64_T": "uint64", "BOOL": "bool", "C_BOOL": "bool", "FLOAT16": "float16",
    "COMPLEX": "complex64", "DOUBLE_COMPLEX": "complex128", "C_FLOAT_COMPLEX": "complex64",
    "C_DOUBLE_COMPLEX": "complex128", "C_COMPLEX": "complex64",
}  # fmt: skip
OP_NAMES = {name.upper(): name for name in OPS}


class Namespace(types.ModuleType):
    """``mpi4py.MPI`` for one in-process rank: ``COMM_WORLD`` is that rank's communicator of the case."""

    def __init__(self, rank: int):
        super().__init__("mpi4py.MPI")
        self.rank, self.COMM_WORLD = rank, WorldProxy()
        self.Request, self.Status, self.Exception = Request, Status, Exception
        self.ANY_SOURCE, self.ANY_TAG, self.PROC_NULL = ANY_SOURCE, ANY_TAG, PROC_NULL
        self.IN_PLACE, self.UNDEFINED, self.BOTTOM = _Marker("IN_PLACE"), -32766, _Marker("BOTTOM")
        self.REQUEST_NULL = None
        self.THREAD_SINGLE, self.THREAD_FUNNELED, self.THREAD_SERIALIZED, self.THREAD_MULTIPLE = 0, 1, 2, 3
        for name, dtype in DATATYPES.items():
            setattr(self, name, Datatype(name, dtype))
        for name, key in OP_NAMES.items():
            setattr(self, name, Op(name, key))

    @property
    def COMM_SELF(self) -> Any:
        raise NotOffered("MPI.COMM_SELF")

    def Wtime(self) -> float:
        return time.perf_counter()

    def Wtick(self) -> float:
        return 1e-9

    def Get_processor_name(self) -> str:
        return f"in-process-rank-{self.rank}"

    def Get_library_version(self) -> str:
        return "the kit's in-process ranks (collectives.inprocess)"

    def Is_initialized(self) -> bool:
        return True

    def Is_finalized(self) -> bool:
        return False

    def Init(self) -> None:
        pass

    def Init_thread(self, required: int = 3) -> int:
        return required

    def Finalize(self) -> None:
        pass

    def Query_thread(self) -> int:
        return 3

    def __getattr__(self, name: str) -> Any:
        error = _missing("MPI", name)
        if isinstance(error, NotOffered):
            raise NotOffered(f"MPI.{name}")
        raise AttributeError(f"module 'mpi4py.MPI' has no attribute '{name}'")


class WorldProxy:
    """``MPI.COMM_WORLD`` of one rank: the same object for every case, forwarding to the case's communicator."""

    def __init__(self) -> None:
        self.target: Any = None

    def __getattr__(self, name: str) -> Any:
        if self.target is None:
            raise NotOffered("MPI.COMM_WORLD outside a call (at import time)")
        return getattr(self.target, name)

    def __eq__(self, other: object) -> bool:
        return other is self or other is self.target

    __hash__ = object.__hash__


class _Marker:
    def __init__(self, name: str):
        self.name = name

    def __repr__(self) -> str:
        return f"MPI.{self.name}"


class _Rc:
    """``mpi4py.rc``: set or called (``mpi4py.rc(initialize=False)``), it changes nothing in process."""

    def __init__(self) -> None:
        self.initialize = self.finalize = True
        self.threads, self.thread_level, self.recv_mprobe = True, "multiple", True

    def __call__(self, **kwargs: Any) -> None:
        for key, value in kwargs.items():
            setattr(self, key, value)


def fake_mpi4py(rank: int) -> types.ModuleType:
    """A stand-in ``mpi4py`` package whose ``MPI`` is ``Namespace(rank)``."""
    package = types.ModuleType("mpi4py")
    package.MPI = Namespace(rank)  # type: ignore[attr-defined]
    package.rc = _Rc()  # type: ignore[attr-defined]
    package.__version__ = "4.0 (the kit's in-process ranks)"  # type: ignore[attr-defined]
    package.__path__ = []  # a package, so `import mpi4py.MPI` resolves
    return package


def _importer(package: types.ModuleType) -> Callable[..., Any]:
    """``__import__`` that answers ``mpi4py`` and ``mpi4py.MPI`` with ``package``, anything else as usual."""

    def importer(name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level == 0 and (name == "mpi4py" or name.startswith("mpi4py.")):
            if name == "mpi4py" or not fromlist:
                return package
            return package.MPI  # from mpi4py.MPI import X
        return builtins.__import__(name, globals, locals, fromlist, level)

    return importer


_counter = itertools.count()
_HERE = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_PACKAGES = tuple(os.path.join(_HERE, name) + os.sep for name in ("collectives", "minidl"))
_load_lock = threading.Lock()


def _mutable_globals(fn: Any) -> list[str]:
    """The module globals ``fn`` names that one rank could change under another (arrays, lists, dicts, sets)."""
    if not isinstance(fn, types.FunctionType):
        return []
    mutable = (np.ndarray, list, dict, set, bytearray)
    return [n for n in fn.__code__.co_names if isinstance(fn.__globals__.get(n), mutable)]


class ModuleCopies:
    """One copy of ``fn``'s module per rank and world size (executed again from its file), and its ``fn``.

    A copy is kept for every case of the same world size p, as a process lives through one job:
    state a module keeps between calls (a counter, a cache sized for p) behaves as under mpiexec.
    """

    def __init__(self, fn: Callable[..., Any]):
        self.fn = fn
        self.copies: dict[tuple[int, int], tuple[Callable[..., Any], Namespace]] = {}
        code = getattr(fn, "__code__", None)
        self.path: str | None = code.co_filename if code is not None else None
        self.qualname = getattr(fn, "__qualname__", "")
        self.shared_note = ""
        self.package = getattr(fn, "__globals__", {}).get("__package__")
        if self.path and os.path.abspath(self.path).startswith(_PACKAGES):
            self.path = None  # the package's own algorithms keep no state: one copy serves every rank
            return
        script = getattr(fn, "__module__", None) == "__main__"  # run again, a script would run its body again
        if script or not self.path or not self.path.endswith(".py") or "<locals>" in self.qualname or not self.qualname:
            self.path = None
            shared = _mutable_globals(fn)
            if shared:
                where = "in the script being run" if script else "not at the top level of a file"
                self.shared_note = (
                    f"note: {self.qualname or fn!r} is {where}, so the in-process ranks share its module's "
                    f"{', '.join(shared)} (separate processes would not); a rank's own copy needs it in a file of its own"
                )

    def function(self, w: int, comm: Any) -> tuple[Callable[..., Any], Namespace]:
        """Rank w's copy of the function and its ``MPI`` namespace, whose COMM_WORLD is now ``comm``."""
        key = (comm.Get_size(), w)
        if key in self.copies:
            self.copies[key][1].COMM_WORLD.target = comm
        else:
            package = fake_mpi4py(w)
            package.MPI.COMM_WORLD.target = comm  # the module may use it at import
            self.copies[key] = self._load(w, package)
        return self.copies[key]

    def load_with(self, package: types.ModuleType) -> Callable[..., Any]:
        """``fn`` from a copy of its module whose ``mpi4py`` is ``package`` (under --mpi: the watched real MPI)."""
        if self.path is not None:
            try:
                return self._exec(0, package)
            except Exception:  # noqa: BLE001, S110  (it imported once already: share that copy)
                pass
        return self._rebind(package)

    def _load(self, w: int, package: types.ModuleType) -> tuple[Callable[..., Any], Namespace]:
        namespace: Namespace = package.MPI
        if self.path is not None:
            try:
                return self._exec(w, package), namespace
            except Exception as exc:  # noqa: BLE001  (the file ran once already: fall back to sharing it)
                self.shared_note = f"note: the ranks share one copy of the module ({type(exc).__name__} re-running it)"
        return self._rebind(package), namespace

    def _exec(self, w: int, package: types.ModuleType) -> Callable[..., Any]:
        assert self.path is not None
        name = f"_collectives_check_rank{w}_{next(_counter)}"
        spec = importlib.util.spec_from_file_location(name, self.path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        module.__package__ = self.package  # its relative imports resolve as they did
        module.__builtins__ = dict(vars(builtins), __import__=_importer(package))  # type: ignore[attr-defined]
        with _load_lock:
            sys.modules[name] = module  # dataclasses and typing look their module up by name
        spec.loader.exec_module(module)
        fn: Any = module
        for part in self.qualname.split("."):
            fn = getattr(fn, part)
        return fn

    def _rebind(self, package: types.ModuleType) -> Callable[..., Any]:
        """A function whose file cannot run again: the same code over a copy of its globals, MPI swapped."""
        fn = self.fn
        if not isinstance(fn, types.FunctionType):
            return fn
        real = sys.modules.get("mpi4py.MPI")
        scope = dict(fn.__globals__)
        for key, value in list(scope.items()):
            if real is not None and value is real:
                scope[key] = package.MPI
            elif value is sys.modules.get("mpi4py"):
                scope[key] = package
        scope["__builtins__"] = dict(vars(builtins), __import__=_importer(package))
        copy = types.FunctionType(fn.__code__, scope, fn.__name__, fn.__defaults__, fn.__closure__)
        copy.__kwdefaults__, copy.__qualname__ = fn.__kwdefaults__, fn.__qualname__
        return copy


__all__ = ["DATATYPES", "Datatype", "ModuleCopies", "Namespace", "Op", "fake_mpi4py"]
