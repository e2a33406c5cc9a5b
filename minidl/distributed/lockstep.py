"""Ranks in lockstep: every optimizer step, and the end of a run, is agreed on before a gradient moves.

Synchronous data parallelism needs every rank to take the same optimizer steps. A rank that takes one
step fewer (it ran out of batches, or skipped a step after a NaN loss) or one more, a rank that
evaluates alone (``if rank == 0: evaluate(model)``) with a collective inside, a rank that calls
``add_param_group`` alone: each leaves its partners waiting in a collective that cannot complete.
MPI has no notion of a step, and the job hangs without a word (Horovod's most asked question:
"which rank is stuck, and where?").

The design that finds them is the collectives' own (collectives/agreement.py): every collective
starts with the agreement handshake, the same partners, the same tag and messages of at most ROOM
bytes whatever the call, so ranks that call *different* collectives meet in it, and every rank
raises the same ``MismatchError`` naming which ranks brought what. Two calls join that handshake:

- ``agree_on_step``: every gradient exchange of ``DistributedOptimizer`` starts with a handshake whose
  header names the step (``"optimizer step 12"``, the 12th update). A rank that called another
  collective meanwhile (an evaluation's allreduce, ``add_param_group``'s layout check) is found at
  the first collective where the ranks part, not at the end of the run;
- ``end_of_run``: the end of a run is such a call too (``"end of run"``), made by
  ``dist.run`` when the program returns, and at the exit of a process that made a DistributedOptimizer
  over all of an MPI job. A rank that stops early meets the others' next step, and both raise. (A rank
  that skips a step without communicating is out of step from then on without knowing it: the
  step numbers still match, each rank counting its own; its partners' extra step meets its end.)

The collectives let a caller add a few words to each rank's row of a mismatch's table
(``agreement.CONTEXT``: here "11 steps done") and a sentence to the error (``agreement.NOTES``: here
``WHY``), so every rank's error names each rank, its call and its step, and says why this happens.
Cost: one handshake a step, log2 p rounds of 104-byte messages; it is also the barrier before the
exchange that ``measure_wait`` times (no rank leaves it before every rank has entered it).
What it cannot see: a rank that stops communicating while alive (an endless loop, a sleep): that is
what ``MINIDL_COMM_TIMEOUT`` (timeout.py) is for; a plain collective called with ``check=False``.
"""

from __future__ import annotations

import atexit
import os
import sys
import threading
from typing import Any

from collectives.agreement import (
    CONTEXT,
    NOTES,
    ON_MISMATCH,
    MismatchError,
    handshake,
    header_bytes,
    raise_unless_agreed,
)
from minidl.distributed.timeout import activity, base_comm

STEP = "optimizer step"
END = "end of run"
WHY = (
    "Ranks that train together must take the same optimizer steps. The classic cause is one rank that "
    "evaluates alone (if rank == 0: evaluate(...)) and calls a collective there (an allreduce of a metric, "
    "a DistributedOptimizer step, a checkpoint) while the others go on training: evaluate on every rank, each "
    "on its share, or without collectives. Other causes: a different number of batches per rank, a step "
    "skipped on one rank, add_param_group on one rank."
)

_last = threading.local()  # this rank's (thread's) latest DistributedOptimizer: (comm, optimizer)
_at_exit: list[tuple[Any, Any]] = []  # MPI: the (comm, optimizer) whose end is agreed on at exit


class StepMismatchError(MismatchError):
    """Ranks are at different optimizer steps, or one has left the run; raised on every rank."""


def agree_on_step(comm: Any, done: int) -> None:
    """Every rank of ``comm`` is about to exchange the gradients of its optimizer step ``done + 1``; else raise
    on all (``done``: the updates applied so far)."""
    _last.done = done  # on overlap's communication thread too, for steps_done()
    _agree(comm, f"{STEP} {done + 1}")


def end_of_run(comm: Any, steps: int) -> None:
    """This rank has finished, after ``steps`` optimizer steps: so must every rank of ``comm`` be, else raise."""
    with activity(f"{END} after {steps} optimizer steps"):
        _agree(comm, END)  # the steps are in this rank's row of a mismatch (steps_done)


def _agree(comm: Any, call: str) -> None:
    if comm.Get_size() == 1:
        return
    head = header_bytes(None, None, "", call[:32])
    try:
        raise_unless_agreed(comm, head, handshake(comm, head)[1])
    except MismatchError as e:  # (making it forgot the end of run: ON_MISMATCH)
        raise StepMismatchError(str(e)) from None


def track(comm: Any, optimizer: Any) -> None:
    """Remember ``optimizer`` (its ``updates``) as this rank's latest one on ``comm``, for ``finish``.

    Called by every DistributedOptimizer of more than one rank; on an MPI communicator the end of the
    process is then agreed on too (``atexit``; if it spans the whole job), unless it ends with an uncaught
    exception (the job then ends anyway).
    """
    _last.entry = (comm, optimizer)
    if threading.current_thread() is threading.main_thread() and _spans_the_mpi_job(comm):
        if not _at_exit:
            atexit.register(_finish_at_exit)
        _at_exit[:] = [(comm, optimizer)]


def forget() -> None:
    """Nothing to agree on at the end any more (it was agreed, or the run failed)."""
    _last.entry = None
    if threading.current_thread() is threading.main_thread():
        _at_exit.clear()


def finish() -> None:
    """The end of this rank's run (``dist.run`` calls it when the program returns): agree on it with the
    ranks of the latest DistributedOptimizer, if any, each having taken the same number of steps."""
    entry = getattr(_last, "entry", None)
    if entry is not None:
        end_of_run(entry[0], entry[1].updates)
    forget()


def _finish_at_exit() -> None:
    from minidl.distributed.timeout import await_reports

    if isinstance(getattr(sys, "last_value", None), MismatchError):  # printed (above) on its way out, as on
        sys.stderr.flush()  # every rank: the others may be slower to print theirs, and this exit ends the job
        await_reports()
        return
    if not _at_exit or getattr(sys, "last_value", None) is not None:
        return  # already agreed (dist.run), or the process dies of an error (MPI then ends the job)
    comm, optimizer = _at_exit[0]
    _last.entry = _at_exit[0]  # (the main thread's): this rank's row then names its steps
    try:
        end_of_run(comm, optimizer.updates)
    except MismatchError as e:
        print(f"[rank {comm.Get_rank()} of {comm.Get_size()}] {type(e).__name__}: {e}", file=sys.stderr, flush=True)
        await_reports()  # (timeout.py) the partners print theirs before this exit ends the job
        os._exit(1)  # an exception in an atexit handler would not change the exit status


def steps_done() -> str:
    """This rank's row in a mismatch's table ends with this: its step (the updates of its latest optimizer)."""
    entry = getattr(_last, "entry", None)
    done = entry[1].updates if entry is not None else getattr(_last, "done", None)
    return "" if done is None else f"{done} step{'' if done == 1 else 's'} done"


NOTES[STEP] = NOTES[END] = WHY  # said on every rank, whichever collective it is in
CONTEXT[:] = [steps_done]  # every rank's row names its step
ON_MISMATCH[:] = [forget]  # a failed agreement, in any collective or layout check: nothing is left to agree on


def _spans_the_mpi_job(comm: Any) -> bool:
    """An MPI communicator of every process of the job: every process then ends on it (a sub-communicator's
    optimizer, a pipeline stage's data-parallel group, is left to dist.run)."""
    if type(base_comm(comm)).__module__.split(".")[0] != "mpi4py":
        return False
    from mpi4py import MPI

    return comm.Get_size() == MPI.COMM_WORLD.Get_size()
