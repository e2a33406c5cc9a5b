"""Every flag of ``python -m minidl.train`` checked before anything is built: one line per mistake, exit 2.

A mistake found after the model is built, the data read and the ranks started costs minutes and
prints a traceback per rank; found here, it is one line::

    python -m minidl.train: error: --lr must be a finite number > 0, got inf

``check_args(args)`` raises ``UsageError`` for the first problem (the entry point prints it once,
with the rank under mpiexec, and exits 2). It checks numbers (finite, in range), paths (``--data``
holds what the program reads, ``--save`` can be written, ``--resume`` exists) and flags that do not
apply to the chosen ``--parallel`` mode (each with the reason).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from minidl.data.text import PTB_FILES, PTB_HINT


class UsageError(Exception):
    """A mistake on the command line: printed as one line, no traceback; the program exits with status 2."""


# flag (its argparse dest), its default, the --parallel modes it applies to, and why
MODE_FLAGS: tuple[tuple[str, str, Any, tuple[str, ...], str], ...] = (
    (
        "--allreduce",
        "allreduce",
        "ring",
        ("data", "zero", "local-sgd", "pipeline", "model", "tensor", "ps"),
        "one process has nothing to reduce",
    ),
    ("--fusion-mb", "fusion_mb", 64.0, ("data",), "it sizes data parallelism's gradient allreduces"),
    ("--compression", "compression", "none", ("data",), "it compresses the gradient allreduces"),
    (
        "--sync-bn",
        "sync_bn",
        False,
        ("data", "zero"),
        "batch statistics are shared only between data-parallel replicas",
    ),
    ("--overlap", "overlap", False, ("data",), "only DistributedOptimizer's bucket allreduces run during backward"),
    ("--zero-stage", "zero_stage", None, ("zero",), "only ZeRO shards the model's state"),
    ("--timeline", "timeline", None, ("data", "zero"), "the timeline records data-parallel steps"),
    ("--precision", "precision", "fp32", ("none", "data", "zero"), "mixed precision is emulated in these modes"),
    ("--lr-scaling", "lr_scaling", "none", ("none", "data", "zero"), "the global batch is batch x ranks only here"),
    ("--base-batch", "base_batch", None, ("none", "data", "zero"), "it is the base of --lr-scaling"),
    ("--servers", "servers", 1, ("ps",), "only a parameter server has servers"),
    ("--async", "asynchronous", False, ("ps",), "only a parameter server applies gradients asynchronously"),
    ("--fetch-every", "fetch_every", 1, ("ps",), "only parameter-server workers fetch parameters"),
    ("--drop-lost-workers", "drop_lost_workers", False, ("ps",), "only a parameter server drops workers"),
    ("--staleness-bound", "staleness_bound", None, ("ps",), "only an asynchronous parameter server has staleness"),
    ("--average-every", "average_every", 4, ("local-sgd",), "only local SGD averages parameters every k steps"),
    ("--schedule", "schedule", "1f1b", ("pipeline",), "only a pipeline has a schedule"),
    ("--micro-batches", "micro_batches", 4, ("pipeline",), "only a pipeline splits batches into micro-batches"),
    ("--pipeline-stages", "pipeline_stages", None, ("pipeline",), "only a pipeline has stages"),
    ("--resume", "resume", None, ("none", "data"), "only these modes write checkpoints a run continues from"),
    ("--save-every", "save_every", None, ("none", "data"), "only these modes write checkpoints a run continues from"),
    ("--save", "save", None, ("none", "data", "model", "tensor", "pipeline"), "this mode writes no checkpoint"),
)


def check_args(args: argparse.Namespace, root: bool = True) -> None:
    """Raise ``UsageError`` naming the first flag that is wrong (see the module doc). ``root``: this is the rank
    that writes ``--save`` and reads ``--resume`` (rank 0; the others need neither path)."""
    check_numbers(args)
    check_modes(args)
    check_paths(args, root)


def check_numbers(args: argparse.Namespace) -> None:
    finite_positive = ("lr", "baseline_wps")
    for name in finite_positive:
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value > 0):
            raise UsageError(f"{flag(name)} must be a finite number > 0, got {value}")
    if getattr(args, "base_batch", None) is not None and getattr(args, "lr_scaling", "none") != "linear":
        raise UsageError("--base-batch needs --lr-scaling linear (it is the batch the rate is scaled from)")
    for name in ("fusion_mb", "momentum", "weight_decay", "warmup_epochs"):
        value = getattr(args, name, None)
        if value is not None and not (math.isfinite(value) and value >= 0):
            raise UsageError(f"{flag(name)} must be a finite number >= 0, got {value}")
    dropout = getattr(args, "dropout", None)
    if dropout is not None and not 0 <= dropout < 1:
        raise UsageError(f"--dropout must be in [0, 1), got {dropout}")
    check_loss_scale(getattr(args, "loss_scale", None), getattr(args, "precision", "fp32"))
    for name in ("micro_batches", "pipeline_stages", "staleness_bound"):
        value = getattr(args, name, None)
        if value is not None and value < (0 if name == "staleness_bound" else 1):
            raise UsageError(f"{flag(name)} must be >= {0 if name == 'staleness_bound' else 1}, got {value}")


def check_loss_scale(loss_scale: str | None, precision: str) -> None:
    """``--loss-scale dynamic|N`` needs a reduced precision, and N must be a finite number >= 1."""
    if loss_scale is None:
        return
    if precision == "fp32":
        raise UsageError("--loss-scale needs --precision fp16 or bf16 (float32 gradients do not underflow)")
    if loss_scale != "dynamic":
        try:
            value = float(loss_scale)
        except ValueError:
            raise UsageError(f"--loss-scale must be 'dynamic' or a number >= 1, got {loss_scale!r}") from None
        if not (math.isfinite(value) and value >= 1):
            raise UsageError(f"--loss-scale must be 'dynamic' or a number >= 1, got {loss_scale!r}")


def check_paths(args: argparse.Namespace, root: bool = True) -> None:
    data = getattr(args, "data", None)
    if data is not None and hasattr(args, "text"):  # the language model's --data: a PTB directory
        check_ptb(data)
    elif data is not None and not os.path.isdir(data):
        raise UsageError(f"--data {data}: no such directory")
    text = getattr(args, "text", None)
    if text is not None and not os.path.isfile(text):
        raise UsageError(f"--text {text}: no such file")
    if not root:
        return
    resume = getattr(args, "resume", None)
    if resume is not None and not os.path.isfile(resume):
        raise UsageError(f"--resume {resume}: no such checkpoint file")
    save = getattr(args, "save", None)
    if save is not None:
        check_writable(save)
    if getattr(args, "save_every", None) and save is None:
        raise UsageError("--save-every needs --save PATH (the scheduled checkpoints are written beside it)")


def check_ptb(directory: str) -> None:
    if not os.path.isdir(directory):
        raise UsageError(f"--data {directory}: no such directory; {PTB_HINT}")
    missing = [f for f in PTB_FILES.values() if not os.path.isfile(os.path.join(directory, f))]
    if missing:
        raise UsageError(f"--data {directory}: missing {', '.join(missing)}; {PTB_HINT}")


def check_writable(path: str) -> None:
    """``--save PATH``: its directory exists and can be written, and PATH is not a directory."""
    if os.path.isdir(path):
        raise UsageError(f"--save {path}: is a directory; give a file name such as {os.path.join(path, 'ckpt.npz')}")
    directory = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(directory):
        raise UsageError(f"--save {path}: the directory {directory} does not exist")
    if not os.access(directory, os.W_OK | os.X_OK):
        raise UsageError(f"--save {path}: the directory {directory} is not writable")
    if os.path.exists(path) and not os.access(path, os.W_OK):
        raise UsageError(f"--save {path}: the file exists and is not writable")


def check_modes(args: argparse.Namespace) -> None:
    mode = getattr(args, "parallel", "none")
    for name, dest, default, modes, why in MODE_FLAGS:
        if not hasattr(args, dest) or getattr(args, dest) == default or mode in modes:
            continue
        where = "/".join(modes)
        raise UsageError(f"{name} applies only to --parallel {where} ({why}), not to --parallel {mode}")


def flag(dest: str) -> str:
    return "--" + dest.replace("_", "-")


# ----------------------------------------------------------------------------- the entry point's calls
def train_timeout() -> float | None:
    """The communication timeout of ``python -m minidl.train``: MINIDL_COMM_TIMEOUT, else a few minutes (a step of
    these models takes well under a second; a rank that waits minutes is waiting for a rank that is gone)."""
    from minidl.distributed.timeout import DEFAULT_TRAIN_TIMEOUT, timeout_from_env

    return timeout_from_env(DEFAULT_TRAIN_TIMEOUT)


PROG = "python -m minidl.train"
PER_RANK_PATHS = (
    "save",
    "resume",
    "log_json",
    "data",
    "text",
)  # may differ between ranks (rank 0 writes; node-local copies)
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "PMIX_RANK")  # set by MPICH's and Open MPI's launchers
SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def validate_or_exit(args: argparse.Namespace) -> None:
    """Check ``args`` on every rank and, under mpiexec, that every rank was given the same settings (an MPMD
    launch ``mpiexec -n 1 ... --lr 1 : -n 1 ... --lr 2`` would otherwise train on in disagreement). On a
    problem print one line, once (the first rank that found it, with its rank), and exit with status 2."""
    error = None
    try:
        check_args(args, root=_launch_rank() == 0)
    except UsageError as e:
        error = str(e)
    if not launched_by_mpi():
        if error is not None:
            raise SystemExit(print_error(error))
        return
    from mpi4py import MPI

    comm = MPI.COMM_WORLD
    failed = _gather_flags(comm, error is not None)
    if any(failed):
        first = failed.index(True)
        if comm.Get_rank() == first:
            print_error(error, f"[rank {first} of {comm.Get_size()}] ")
        raise SystemExit(2)
    difference = settings_difference(comm, args)
    if difference is not None:
        if comm.Get_rank() == 0:
            print_error(difference, f"[rank 0 of {comm.Get_size()}] ")
        raise SystemExit(2)


def _launch_rank() -> int:
    """This process's rank from the launcher's environment (0 when not launched by mpiexec)."""
    for v in RANK_VARIABLES:
        if v in os.environ:
            return int(os.environ[v])
    return 0


def launched_by_mpi() -> bool:
    """Whether mpiexec (MPICH's or Open MPI's) started this process with other ranks (no MPI import needed)."""
    return any(int(os.environ.get(v, "1") or 1) > 1 for v in SIZE_VARIABLES) and any(
        v in os.environ for v in RANK_VARIABLES
    )


def _gather_flags(comm: Any, flag_: bool) -> list[bool]:
    import numpy as np

    flags = np.zeros(comm.Get_size(), dtype=np.int64)
    flags[comm.Get_rank()] = flag_
    out = np.empty_like(flags)
    from mpi4py import MPI

    comm.Allreduce(flags, out, op=MPI.SUM)
    return [bool(f) for f in out]


def settings_difference(comm: Any, args: argparse.Namespace) -> str | None:
    """None if every rank has the same ``args``, else which flag differs first and which ranks gave what."""
    from collectives import MismatchError
    from minidl.distributed.fingerprint import check_layout

    plain = (str, int, float, bool, type(None), list, tuple)
    rows = [
        (flag(k), repr(v)) for k, v in sorted(vars(args).items()) if isinstance(v, plain) and k not in PER_RANK_PATHS
    ]
    try:
        check_layout(comm, rows, "ranks started with different settings", subject="the command line")
    except MismatchError as e:
        return str(e)
    return None


def print_error(message: str | None, prefix: str = "") -> int:
    import sys

    print(f"{prefix}{PROG}: error: {message}", file=sys.stderr, flush=True)
    return 2


# ----------------------------------------------------------------------------- resuming
# what a saved data position (epoch, window or batch, step) counts in, and the flags that set it
RESUME_SETTINGS = {
    "num_steps": "--num-steps (the BPTT window: the saved position counts windows of this many words)",
    "global_batch": "--batch-size x ranks (the global batch: the saved position counts global batches or streams)",
}


def position_units(cfg: Any, ranks: int) -> dict[str, int]:
    """What a checkpoint's data position counts in for a run with config ``cfg`` on ``ranks`` ranks."""
    units = {"global_batch": int(cfg.batch_size) * ranks}
    if hasattr(cfg, "num_steps"):
        units["num_steps"] = int(cfg.num_steps)
    return units


def check_resume_settings(path: str, saved: dict[str, Any], current: dict[str, int]) -> None:
    """Refuse a resume whose saved position would mean another place in the data (naming the setting): with
    another BPTT length the window index points elsewhere in the corpus, with another global batch the batch
    index does. (The world size alone may change where the global batch stays the same: the data order is
    the same; a checkpoint that holds per-rank state refuses another world size in ``dist.load_checkpoint``.)"""
    for key, value in current.items():
        if key in saved and int(saved[key]) != int(value):
            raise ValueError(
                f"--resume {path}: the checkpoint was written with {key} = {int(saved[key])}, this run has {value}: "
                f"{RESUME_SETTINGS.get(key, key)} must be the checkpoint's to continue exactly where it stopped"
            )
