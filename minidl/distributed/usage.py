"""A command-line mistake in an MPI job: reported once, by the rank that found it, and every rank exits 2.

Under mpiexec each rank parses its own command line. A mistake found by one rank alone would leave the others
waiting in their first collective; a rank started with other flags (an MPMD launch ``mpiexec -n 1 ... --lr 1 :
-n 1 ... --lr 2``) would train on in disagreement. ``validate_or_exit(args, check, prog)`` runs ``check`` on
every rank, agrees on the outcome in one allreduce, then compares every rank's flags (``check_layout``, one
digest each), before any model is built::

    [rank 1 of 2] python -m minidl.train: error: --lr must be a finite number > 0, got inf
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # set by MPICH's and Open MPI's launchers
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")
PER_RANK_PATHS = ("save", "resume", "log_json", "data", "text")  # may differ between ranks (node-local copies)


class UsageError(Exception):
    """A mistake on the command line: printed as one line, no traceback; the program exits with status 2."""


class UsageExit(SystemExit):
    """Exit status 2 for a mistake that every rank finds alike (the same flags, the same data, or after the ranks
    agreed), its one line printed once: ``dist.run`` lets it end the job as a finished one ends (every rank raises
    it at the same point), with no abort and no traceback per rank."""

    ends_together = True

    def __init__(self) -> None:
        super().__init__(2)


def validate_or_exit(args: argparse.Namespace, check: Callable[..., None], prog: str) -> None:
    """``check(args, root=...)`` on every rank (``root``: the rank that writes and reads checkpoints) and, under
    mpiexec, the same flags on every rank. On a problem print one line, once, and exit with status 2."""
    error = None
    try:
        check(args, root=launch_rank() == 0)
    except UsageError as e:
        error = str(e)
    if not launched_by_mpi():
        if error is not None:
            raise SystemExit(print_error(f"{prog}: error: {error}"))
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    mine, failed = np.zeros(comm.Get_size(), dtype=np.int64), np.empty(comm.Get_size(), dtype=np.int64)
    mine[comm.Get_rank()] = error is not None
    comm.Allreduce(mine, failed, op=MPI.SUM)
    reporter, message = (int(np.argmax(failed)), error) if failed.any() else (0, settings_difference(comm, args))
    if message is None and not failed.any():
        return
    if comm.Get_rank() == reporter:
        print_error(f"[rank {reporter} of {comm.Get_size()}] {prog}: error: {message}")
    raise SystemExit(2)


def launch_rank() -> int:
    """This process's rank from the launcher's environment (0 when not launched by mpiexec)."""
    return next((int(os.environ[v]) for v in RANK_VARIABLES if v in os.environ), 0)


def launched_by_mpi() -> bool:
    """Whether mpiexec (MPICH's or Open MPI's) started this process with other ranks (no MPI import needed)."""
    sized = any(int(os.environ.get(v, "1") or 1) > 1 for v in SIZE_VARIABLES)
    return sized and any(v in os.environ for v in RANK_VARIABLES)


def settings_difference(comm: Any, args: argparse.Namespace) -> str | None:
    """None if every rank has the same ``args``, else which flag differs first and which ranks gave what."""
    from collectives import MismatchError
    from minidl.distributed.fingerprint import check_layout

    plain = (str, int, float, bool, type(None), list, tuple)
    rows = [
        ("--" + k.replace("_", "-"), repr(v))
        for k, v in sorted(vars(args).items())
        if isinstance(v, plain) and k not in PER_RANK_PATHS
    ]
    try:
        check_layout(comm, rows, "ranks started with different settings", subject="the command line")
    except MismatchError as e:
        return str(e)
    return None


def print_error(line: str) -> int:
    print(line, file=sys.stderr, flush=True)
    return 2
