"""Which communicator this rank trains on (``init()``, ``rank()``, ``size()``, ``barrier()``), and ``run()``/``abort``.

The communicator is remembered per thread (``threading.local``), not per process: the simulated
communicator of ``collectives.simulate`` runs every rank as a thread of one process, and each of
those threads calls ``init(comm)`` with its own rank's communicator. Under ``mpiexec`` a process
has one main thread, so per-thread and per-process are the same thing; a communicator given to
``init()`` from the main thread is also the default for any helper threads the program starts.

Every function of ``minidl.distributed`` takes an optional ``comm=``; ``None`` means the one
``init()`` stored, so a program says ``dist.init()`` once and never passes it again.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

_local = threading.local()
_main_comm: Any = None  # the main thread's communicator, the fallback for other threads


def init(comm: Any = None, timeout: float | None = None) -> Any:
    """Start data-parallel work on ``comm`` (``MPI.COMM_WORLD`` by default) and return it.

    ``comm`` is an ``mpi4py`` communicator or anything with the same point-to-point subset
    (``Get_rank``, ``Get_size``, ``Send``, ``Recv``, ``Sendrecv``, ``Isend``, ``Irecv``, ``Barrier``),
    such as a rank of ``collectives.simulate``. Calling it again replaces the communicator.

    ``timeout``: seconds a rank may wait in any communication before it raises ``CommTimeoutError``
    naming the call, the step and the peers (``timeout.py``); None reads ``MINIDL_COMM_TIMEOUT``
    (unset: no timeout), 0 turns it off. The returned communicator is then a ``TimeoutComm``.
    """
    global _main_comm
    from minidl.distributed.timeout import timeout_from_env, unwrap, with_timeout

    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    for method in ("Get_rank", "Get_size", "Send", "Recv", "Sendrecv"):
        if not callable(getattr(comm, method, None)):
            raise TypeError(
                f"dist.init: {type(comm).__name__} is not a communicator (it has no {method}()); pass an "
                "mpi4py communicator or one from collectives.simulate"
            )
    seconds = timeout_from_env() if timeout is None else (float(timeout) if timeout else None)
    if seconds is not None or timeout == 0:
        comm = with_timeout(comm, seconds) if seconds is not None else unwrap(comm)
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


# ----------------------------------------------------------------------------- failing together
# A rank that fails brings the whole job down, loudly, instead of leaving the others hanging.
#
# In a data-parallel job every rank waits for every other in each allreduce. If one rank raises and
# simply exits, the others wait forever inside their next collective. So on an uncaught exception a
# rank prints the traceback marked with its rank and calls ``MPI_Abort``, which ends every process of
# the job (mpiexec then exits nonzero). Two ways to get this::
#
#     dist.run(main)                 # call main() under the guard
#     dist.install_excepthook()      # or: any uncaught exception in the script aborts the job
#
# On the simulated communicator (threads of one process) there is no ``Abort``: the exception is
# re-raised and ``collectives.simulate`` reports it.
ABORT_GRACE_S = 0.5  # seconds between printing the error and MPI_Abort (collectives/watch.py waits as long)


def _describe(comm: Any) -> str:
    try:
        return f"[rank {comm.Get_rank()} of {comm.Get_size()}]"
    except Exception:  # the communicator itself may be broken
        return "[rank ?]"


def abort_on_error(exc: BaseException, comm: Any = None, errorcode: int = 1) -> None:
    """Print ``exc``'s traceback with this rank's number to stderr, then abort the job if MPI can.

    A ``MismatchError`` (ranks that disagree: raised on every rank, its message the whole story) prints as
    its one line, ``[rank r of p] StepMismatchError: ...``, as everywhere else, without the traceback.
    Returns (so the caller re-raises) only where the communicator has no ``Abort``.
    """
    from collectives.agreement import MismatchError
    from minidl.distributed.timeout import await_reports

    try:
        comm = get_comm(comm)
    except RuntimeError:  # before dist.init(): under mpiexec the job is still COMM_WORLD, and must end
        comm = _world_if_launched()
    who = _describe(comm) if comm is not None else "[rank ?]"
    if isinstance(exc, MismatchError):
        sys.stderr.write(f"{who} {type(exc).__name__}: {exc}\n")
    else:
        text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
        sys.stderr.write(f"\n{who} aborting the job after an uncaught exception:\n{text}")
    sys.stderr.flush()
    if isinstance(exc, MismatchError) and _on_mpi(comm) and await_reports():
        os._exit(errorcode)  # every rank has printed and is ending: nobody is left waiting, nothing to abort
    if comm is not None and callable(getattr(comm, "Abort", None)):
        # MPI_Abort kills every process at once, the launcher's output forwarding included: give the
        # message a moment to travel through mpiexec first, or the job may end without saying why.
        time.sleep(ABORT_GRACE_S)
        comm.Abort(errorcode)
        # MPICH's MPI_Abort may return on a rank whose partner's abort is already ending the job: end here too,
        # or the caller's re-raise prints the traceback this function just spared.
        sys.stderr.flush()
        os._exit(errorcode)


def _on_mpi(comm: Any) -> bool:
    """Whether ``comm`` is (or wraps) an mpi4py communicator (not the simulator's threads)."""
    from minidl.distributed.timeout import base_comm

    return comm is not None and type(base_comm(comm)).__module__.split(".")[0] == "mpi4py"


def _world_if_launched() -> Any:
    """``MPI.COMM_WORLD`` when this process was started by mpiexec (or has loaded MPI), else None."""
    launched = any(v in os.environ for v in ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK"))
    if not launched and "mpi4py.MPI" not in sys.modules:
        return None
    try:
        from mpi4py import MPI

        return MPI.COMM_WORLD
    except Exception:  # noqa: BLE001 - no MPI to abort through: print and re-raise
        return None


def run(main: Callable[..., Any], *args: Any, comm: Any = None, **kwargs: Any) -> Any:
    """Call ``main(*args, **kwargs)``; if it raises, print the error with the rank and abort the job.

    ``SystemExit(0)``, a ``SystemExit`` marked ``ends_together`` (an agreed Ctrl-C stop: status 130) and a normal
    return pass through, once the ranks have agreed that they all end here,
    after the same number of optimizer steps (lockstep.py: a rank that ends early would leave the others
    waiting in their next step; both raise instead, naming each rank's step). Returns ``main``'s value.
    """
    try:
        result = main(*args, **kwargs)
    except SystemExit as e:
        if e.code in (None, 0) or getattr(e, "ends_together", False):  # a normal end, or an agreed stop (Ctrl-C)
            _finish(comm)
            raise
        abort_on_error(e, comm, errorcode=e.code if isinstance(e.code, int) else 1)
        raise
    except BaseException as e:
        abort_on_error(e, comm)
        raise
    _finish(comm)
    return result


def _finish(comm: Any) -> None:
    from minidl.distributed.lockstep import finish

    try:
        finish()
    except BaseException as e:
        abort_on_error(e, comm)
        raise


def install_excepthook(comm: Any = None) -> None:
    """Make any uncaught exception (main thread or other threads) print with the rank and abort the job."""

    def hook(exc_type: type[BaseException], exc: BaseException, tb: Any) -> None:
        abort_on_error(exc.with_traceback(tb), comm)  # prints; returns only where there is no Abort

    def thread_hook(args: threading.ExceptHookArgs) -> None:
        if args.exc_value is not None:
            abort_on_error(args.exc_value, comm)

    sys.excepthook = hook
    threading.excepthook = thread_hook


class SingleProcess:
    """A one-rank communicator without MPI: enough of mpi4py's for a serial run's checkpoints and a fusion plan."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def Barrier(self) -> None:  # noqa: N802
        pass
