"""A rank that fails brings the whole job down, loudly, instead of leaving the others hanging.

In a data-parallel job every rank waits for every other in each allreduce. If one rank raises and
simply exits, the others wait forever inside their next collective. So on an uncaught exception a
rank prints the traceback marked with its rank and calls ``MPI_Abort``, which ends every process of
the job (mpiexec then exits nonzero). Two ways to get this::

    dist.run(main)                 # call main() under the guard
    dist.install_excepthook()      # or: any uncaught exception in the script aborts the job

On the simulated communicator (threads of one process) there is no ``Abort``: the exception is
re-raised and ``collectives.simulate`` reports it.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from minidl.distributed.context import get_comm

ABORT_GRACE_S = 0.5  # seconds between printing the error and MPI_Abort


def _describe(comm: Any) -> str:
    try:
        return f"[rank {comm.Get_rank()} of {comm.Get_size()}]"
    except Exception:  # the communicator itself may be broken
        return "[rank ?]"


def abort_on_error(exc: BaseException, comm: Any = None, errorcode: int = 1) -> None:
    """Print ``exc``'s traceback with this rank's number to stderr, then abort the job if MPI can.

    Returns (so the caller re-raises) only where the communicator has no ``Abort``.
    """
    try:
        comm = get_comm(comm)
    except RuntimeError:
        comm = None
    who = _describe(comm) if comm is not None else "[rank ?]"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    sys.stderr.write(f"\n{who} aborting the job after an uncaught exception:\n{text}")
    sys.stderr.flush()
    if comm is not None and callable(getattr(comm, "Abort", None)):
        # MPI_Abort kills every process at once, the launcher's output forwarding included: give the
        # message a moment to travel through mpiexec first, or the job may end without saying why.
        time.sleep(ABORT_GRACE_S)
        comm.Abort(errorcode)


def run(main: Callable[..., Any], *args: Any, comm: Any = None, **kwargs: Any) -> Any:
    """Call ``main(*args, **kwargs)``; if it raises, print the error with the rank and abort the job.

    ``SystemExit(0)`` and a normal return pass through. Returns ``main``'s value.
    """
    try:
        return main(*args, **kwargs)
    except SystemExit as e:
        if e.code in (None, 0):
            raise
        abort_on_error(e, comm, errorcode=e.code if isinstance(e.code, int) else 1)
        raise
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
