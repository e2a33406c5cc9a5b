"""Which communicator this rank trains on: ``init()``, ``rank()``, ``size()``, ``barrier()``.

The communicator is remembered per thread (``threading.local``), not per process: the simulated
communicator of ``collectives.simulate`` runs every rank as a thread of one process, and each of
those threads calls ``init(comm)`` with its own rank's communicator. Under ``mpiexec`` a process
has one main thread, so per-thread and per-process are the same thing; a communicator given to
``init()`` from the main thread is also the default for any helper threads the program starts.

Every function of ``minidl.distributed`` takes an optional ``comm=``; ``None`` means the one
``init()`` stored, so a program says ``dist.init()`` once and never passes it again.
"""

from __future__ import annotations

import threading
from typing import Any

_local = threading.local()
_main_comm: Any = None  # the main thread's communicator, the fallback for other threads


def init(comm: Any = None) -> Any:
    """Start data-parallel work on ``comm`` (``MPI.COMM_WORLD`` by default) and return it.

    ``comm`` is an ``mpi4py`` communicator or anything with the same point-to-point subset
    (``Get_rank``, ``Get_size``, ``Send``, ``Recv``, ``Sendrecv``, ``Isend``, ``Irecv``, ``Barrier``),
    such as a rank of ``collectives.simulate``. Calling it again replaces the communicator.
    """
    global _main_comm
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    for method in ("Get_rank", "Get_size", "Send", "Recv", "Sendrecv"):
        if not callable(getattr(comm, method, None)):
            raise TypeError(
                f"dist.init: {type(comm).__name__} is not a communicator (it has no {method}()); pass an "
                "mpi4py communicator or one from collectives.simulate"
            )
    _local.comm = comm
    if threading.current_thread() is threading.main_thread():
        _main_comm = comm
    return comm


def is_initialized() -> bool:
    return getattr(_local, "comm", None) is not None or _main_comm is not None


def get_comm(comm: Any = None) -> Any:
    """``comm`` if given, else this thread's communicator from ``init()``; an error if there is none."""
    if comm is not None:
        return comm
    comm = getattr(_local, "comm", None)
    if comm is None:
        comm = _main_comm
    if comm is None:
        raise RuntimeError(
            "minidl.distributed is not initialized: call dist.init() (or dist.init(comm)) first, "
            "or pass comm= explicitly"
        )
    return comm


def shutdown() -> None:
    """Forget this thread's communicator (the MPI library itself stays up until exit)."""
    global _main_comm
    _local.comm = None
    if threading.current_thread() is threading.main_thread():
        _main_comm = None


def rank(comm: Any = None) -> int:
    """This process's number, 0 .. size()-1."""
    return get_comm(comm).Get_rank()


def size(comm: Any = None) -> int:
    """The number of ranks training together."""
    return get_comm(comm).Get_size()


def barrier(comm: Any = None) -> None:
    """Wait until every rank has reached this call."""
    get_comm(comm).Barrier()
