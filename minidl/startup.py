"""Ctrl-C before the first step and after the last: one line and exit 130, never a traceback per rank.

``python -m minidl.train`` spends its first seconds importing NumPy and MPI, starting the MPI job, reading the
data and building the model, and its last ones on the final checkpoint and the test evaluation. A Ctrl-C
there would raise KeyboardInterrupt wherever it lands: a traceback per rank, under mpiexec an MPI_Abort, or
a rank left waiting in a collective its partners never join. Nothing is worth saving there, so the program's
handler says where the run was and ends the process at once (``os._exit``: no unwinding, no collective)::

    interrupted: during start-up (imports, MPI, data, model), before the first step; nothing saved

It is installed when this module is imported, the first thing ``import minidl`` does, when the process is ``python -m minidl.train``
(before NumPy is imported), and never in a library user's process (a notebook's Ctrl-C stays theirs). While
training, ``minidl.train.interrupt.Watch`` takes SIGINT over (a step the ranks agree on is saved) and gives it
back for the end (``phase`` says which). Under mpiexec a Ctrl-C before MPI has started is kept until it has
(``mpi_started``): a rank that left earlier would leave a partner waiting in MPI_Init (C code, where no Python
handler runs) for ever. Standard library only: it runs before anything else is imported.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType
from typing import NoReturn

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130, as a shell's Ctrl-C
SIZES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE", "PMIX_SIZE")  # a rank of a job of more than one process has one > 1
PROGRAM = "minidl.train"
_phase = ["during start-up (imports, MPI, data, model), before the first step"]


def launched_rank() -> int:
    """This process's rank from the launcher's environment (0 alone): the rank that prints."""
    for name in ("PMI_RANK", "PMIX_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"):
        if os.environ.get(name, "").isdigit():
            return int(os.environ[name])
    return 0


_mpi = {"started": not any(os.environ.get(v, "1") not in ("", "1") for v in SIZES), "pending": False}


def handler(signum: int, frame: FrameType | None) -> None:
    if not _mpi["started"]:  # a partner may be inside MPI_Init, which would wait for this rank for ever
        _mpi["pending"] = True
        return
    end_interrupted(f"interrupted: {_phase[0]}; nothing saved")


def end_interrupted(line: str) -> NoReturn:
    """Rank 0 prints ``line``; every rank ends at once with status 130, but not before that line is out.

    Under mpiexec every rank gets the Ctrl-C, and the first rank to exit ends the job: the others are killed.
    On a loaded machine rank 0, a few hundred milliseconds behind, was killed before its line was out (status
    130 and no word). So where MPI runs, the ranks leave together once each has got here, rank 0 with its line
    out (``minidl.distributed.timeout.await_reports``, at most REPORT_WAIT_S; imported only then, so this module
    stays the standard library's before MPI has started).
    """
    if launched_rank() == 0:
        os.write(2, f"{line}\n".encode())  # unbuffered: os._exit flushes nothing
    if "mpi4py.MPI" in sys.modules:
        from minidl.distributed.timeout import TAG_INTERRUPTED, await_reports

        await_reports(TAG_INTERRUPTED)
    os._exit(EXIT_INTERRUPTED)


def mpi_started() -> None:
    """Every rank of the job is past MPI_Init (or the run uses no MPI): a Ctrl-C that came before ends it now."""
    _mpi["started"] = True
    if _mpi["pending"]:
        handler(signal.SIGINT, None)


def phase(text: str) -> None:
    """What the program is doing, for the line a Ctrl-C prints ("during the final test evaluation")."""
    _phase[0] = text


def is_program() -> bool:
    """Whether this process is ``python [options] -m minidl.train ...`` (the module may still be being found)."""
    argv = getattr(sys, "orig_argv", [])
    return any(a == "-m" and b == PROGRAM for a, b in zip(argv, argv[1:]))


def install() -> None:
    """Make a Ctrl-C one line and exit 130 in the program's process (main thread only)."""
    if is_program():
        signal.signal(signal.SIGINT, handler)


install()  # on import: ``import minidl`` imports this module before anything else
