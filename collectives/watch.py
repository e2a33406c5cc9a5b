"""``MINIDL_COMM_TIMEOUT`` over the public collectives: a rank that waits too long in one raises, naming it.

A rank in ``collectives.allreduce`` whose partners are elsewhere (in MPI's own ``comm.Barrier()``, in another
branch, dead) waits for ever without a word: its Recv cannot tell a late partner from one that will never come.
minidl's training wraps its communicator in a ``TimeoutComm`` (minidl/distributed/timeout.py: every blocking call
polled against a deadline); a script that calls the collectives on a bare ``MPI.COMM_WORLD`` gets the same watch
here when ``MINIDL_COMM_TIMEOUT=SECONDS`` is set. Every public collective is ``@watched``: with the variable set
and an mpi4py communicator, the call runs on the communicator's TimeoutComm (one per communicator, kept), inside
an activity that names it, so the error reads::

    CommTimeoutError: rank 2 of 3: no progress for 10.0 s (MINIDL_COMM_TIMEOUT=10) in Sendrecv during
    collectives.allreduce, waiting for rank 0: ...

and, should nothing catch it, the job ends (MPI_Abort) instead of waiting in the others' calls for ever.
Unset (the default), a call costs one dictionary look-up more. The in-process communicator needs no watch: its
ranks are threads of one process, and a deadlock there is a ``DeadlockError`` at once.
"""

from __future__ import annotations

import functools
import os
import sys
import time
from collections.abc import Callable
from typing import Any, TypeVar

ENV = "MINIDL_COMM_TIMEOUT"
F = TypeVar("F", bound=Callable[..., Any])
_timed: dict[int, tuple[Any, Any]] = {}  # id(communicator) -> (it, its TimeoutComm): the id stays its own


def watched(fn: F) -> F:
    """``fn(comm, ...)``, a public collective, under ``MINIDL_COMM_TIMEOUT`` on an mpi4py communicator."""
    name = f"collectives.{fn.__name__}"

    @functools.wraps(fn)
    def call(comm: Any, *args: Any, **kwargs: Any) -> Any:
        if ENV not in os.environ or type(comm).__module__ != "mpi4py.MPI":
            return fn(comm, *args, **kwargs)
        from minidl.distributed.timeout import CommTimeoutError, activity  # minidl's watch: collectives stand alone

        unchecked = " with check=False (every rank must pass the same check)" if kwargs.get("check") is False else ""
        try:
            with activity(name + unchecked):
                return fn(timed(comm), *args, **kwargs)
        except CommTimeoutError:
            abort_if_uncaught(comm)
            raise

    return call  # type: ignore[return-value]


def abort_if_uncaught(comm: Any) -> None:
    """Should the timeout end the script (nobody catches it), end the job too: the partners it gave up on wait
    in calls of their own that nothing ends, and this process's MPI_Finalize would wait for them. The error is
    printed as Python prints it, then ``comm.Abort(1)``; a script that catches the error keeps the choice."""
    from minidl.distributed.comm import ABORT_GRACE_S
    from minidl.distributed.timeout import CommTimeoutError

    previous = sys.excepthook
    if getattr(previous, "aborts_on_timeout", False):
        return

    def hook(kind: type[BaseException], error: BaseException, tb: Any) -> None:
        previous(kind, error, tb)
        if isinstance(error, CommTimeoutError):
            sys.stderr.flush()
            time.sleep(ABORT_GRACE_S)  # as dist.run does: mpiexec forwards the lines before MPI_Abort ends the job
            comm.Abort(1)

    hook.aborts_on_timeout = True  # type: ignore[attr-defined]
    sys.excepthook = hook


def timed(comm: Any) -> Any:
    """``comm``'s TimeoutComm of MINIDL_COMM_TIMEOUT seconds (``comm`` itself for 0/off); ValueError for a bad value."""
    from minidl.distributed.timeout import timeout_from_env, with_timeout

    seconds = timeout_from_env()
    kept = _timed.get(id(comm))
    if kept is None or kept[0] is not comm or getattr(kept[1], "seconds", None) != seconds:
        kept = _timed[id(comm)] = (comm, with_timeout(comm, seconds))
    return kept[1]
