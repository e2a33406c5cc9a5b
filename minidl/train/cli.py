"""The command line of ``python -m minidl.train lm|cnn``: flags, the preset plus overrides, checks, and the run.

``run(task_class, argv)`` parses the flags, resolves the configuration (``--preset``, or ``quick`` with
``--quick``, with every flag given overriding its field; ``--print-config`` prints it and stops), refuses
flags the ``--parallel`` mode cannot honour (one line, before any work), seeds, joins the MPI job for a
parallel mode and calls ``fit``. In a parallel run an exception on any rank prints with its rank and
aborts the job (``dist.run``) instead of leaving the others waiting.
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from minidl.distributed.pipeline.schedule import SCHEDULES
from minidl.train.checks import train_timeout, validate_or_exit
from minidl.train.loop import fit
from minidl.train.strategies import STRATEGIES, Context, SingleProcess
from minidl.train.strategies.base import refuse


def positive_int(text: str) -> int:
    if int(text) < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return int(text)


def rank_step(text: str) -> tuple[int, int]:
    """``RANK:STEP`` (``--inject-failure``): two integers, the rank >= 0 and the step >= 1."""
    try:
        rank, step = (int(x) for x in text.split(":"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be RANK:STEP (two integers), got {text!r}") from None
    if rank < 0 or step < 1:
        raise argparse.ArgumentTypeError(f"needs a rank >= 0 and a step >= 1, got {text!r}")
    return rank, step


def positive_float(text: str) -> float:
    if not float(text) > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return float(text)


PINT, PFLOAT = {"type": positive_int}, {"type": positive_float}
FLAGS: dict[str, list[tuple[str, dict[str, Any]]]] = {  # group -> (flag, add_argument's keywords)
    "run": [
        ("--epochs", PINT | {"help": "epochs to train (default: the preset's)"}),
        (
            "--max-steps",
            PINT | {"help": "stop after this many optimizer steps in all (counting those before --resume)"},
        ),
        ("--lr", PFLOAT | {"help": "learning rate (default: the preset's)"}),
        ("--batch-size", PINT | {"help": "examples (LM: streams) per rank per step"}),
        ("--seed", {"type": int, "default": 0, "help": "seed of initialization, dropout and shuffling (default 0)"}),
        ("--dtype", {"choices": ("float32", "float64"), "default": "float32", "help": "parameter dtype"}),
        ("--log-every", PINT | {"help": "optimizer steps between progress lines"}),
        ("--log-json", {"metavar": "FILE", "help": "also write every progress and evaluation record as a JSON line"}),
        ("--print-config", {"action": "store_true", "help": "print the settings (preset + flags) and exit"}),
        ("--save", {"metavar": "PATH", "help": "write a checkpoint (.npz) after every epoch and at the end"}),
        ("--resume", {"metavar": "PATH", "help": "continue exactly from a checkpoint written by --save"}),
        ("--save-every", PINT | {"metavar": "N", "help": "also checkpoint every N steps beside --save (atomic)"}),
        ("--keep", PINT | {"default": 3, "metavar": "K", "help": "--save-every: keep the newest K (default 3)"}),
        (
            "--inject-failure",
            {"type": rank_step, "metavar": "RANK:STEP", "help": "that rank dies at that step, once per job (tests)"},
        ),
        ("--quick", {"action": "store_true", "help": "tiny data and model: finishes in seconds (tests)"}),
    ],
    "large batches (Goyal et al. 2017)": [
        ("--lr-scaling", {"choices": ("none", "linear"), "default": "none", "help": "linear: lr x global/base batch"}),
        ("--base-batch", PINT | {"metavar": "N", "help": "the global batch --lr is tuned for (the preset's batch)"}),
        ("--warmup-epochs", {"type": float, "metavar": "K", "help": "ramp the lr up linearly over K epochs"}),
    ],
    "parallelism (run under mpiexec -n P)": [
        ("--allreduce", {"choices": dist.ALGORITHMS, "default": "ring", "help": "allreduce algorithm (default ring)"}),
        ("--fusion-mb", {"type": float, "default": 64.0, "help": "gradient MiB per allreduce (0: one per tensor)"}),
        ("--compression", {"choices": ("none", "fp16"), "default": "none", "help": "gradients on the wire"}),
        ("--overlap", {"action": "store_true", "help": "data: allreduce each bucket during backward (as DDP)"}),
        (
            "--zero-stage",
            {
                "type": int,
                "choices": (1, 2, 3),
                "help": "zero: shard optimizer state (1), + gradients (2), + params (3)",
            },
        ),
        ("--timeline", {"metavar": "FILE", "help": "data, zero: write a Chrome trace of every rank's steps"}),
        (
            "--precision",
            {"choices": ("fp32", "fp16", "bf16"), "default": "fp32", "help": "arithmetic, 16-bit emulated (fp32)"},
        ),
        ("--loss-scale", {"metavar": "dynamic|N", "help": "loss scaling for fp16 (default dynamic with fp16)"}),
        ("--baseline-wps", PFLOAT | {"metavar": "X", "help": "one rank's words/s (images/s): prints the efficiency"}),
    ],
    "pipeline (--parallel pipeline)": [
        ("--schedule", {"choices": SCHEDULES, "default": "1f1b", "help": "pipeline schedule (default 1f1b)"}),
        ("--micro-batches", {"type": int, "default": 4, "metavar": "M", "help": "micro-batches per window (4)"}),
        (
            "--pipeline-stages",
            {"type": int, "metavar": "PP", "help": "stages per pipeline (all ranks); P/PP pipelines"},
        ),
    ],
    "parameter server / local SGD (--parallel ps|local-sgd)": [
        ("--servers", PINT | {"default": 1, "metavar": "S", "help": "ps: server ranks 0..S-1 (default 1)"}),
        ("--async", {"dest": "asynchronous", "action": "store_true", "help": "ps: apply each gradient on arrival"}),
        ("--fetch-every", PINT | {"default": 1, "metavar": "N", "help": "ps --async: pull every N steps (default 1)"}),
        ("--staleness-bound", {"type": int, "metavar": "s", "help": "ps --async: refuse gradients over s updates old"}),
        (
            "--drop-lost-workers",
            {
                "action": "store_true",
                # a worker that really dies: only under mpiexec -disable-auto-cleanup (MPICH) do the others live on
                "help": "ps: a worker silent MINIDL_COMM_TIMEOUT/2 is dropped, not fatal (a dead one: mpiexec "
                "-disable-auto-cleanup)",
            },
        ),
        ("--average-every", PINT | {"default": 4, "metavar": "k", "help": "local-sgd: average every k steps (4)"}),
    ],
}


def build_parser(task: Any) -> argparse.ArgumentParser:
    """The flags of program ``task`` (a task class): its own, the run's, the ``--parallel`` modes'."""
    parser = argparse.ArgumentParser(prog=f"python -m minidl.train {task.name}", description=task.__doc__)
    parser.add_argument("--preset", choices=sorted(task.PRESETS), help="settings (default: demo; quick with --quick)")
    task.add_arguments(parser)
    modes = "; ".join(
        f"{m}: {(STRATEGIES[m].__doc__ or '').splitlines()[0].rstrip('.')}" for m in ("none", *task.modes)
    )
    for title, flags in FLAGS.items():
        group = parser.add_argument_group(title)
        if title.startswith("parallelism"):
            group.add_argument("--parallel", choices=("none", *task.modes), default="none", help=modes)
        for flag, keywords in flags if "pipeline" in task.modes or "pipeline" not in title else ():
            group.add_argument(flag, **keywords)
    return parser


def resolve(task: Any, args: argparse.Namespace) -> tuple[str, Any]:
    """The preset's name and its configuration with every flag given (``task.OVERRIDES``: flag -> field)."""
    quick = args.quick or os.environ.get("MINIDL_QUICK") == "1"
    preset = args.preset or ("quick" if quick else "demo")
    changes = {
        field: getattr(args, flag) for flag, field in task.OVERRIDES.items() if getattr(args, flag, None) is not None
    }
    return preset, task.PRESETS[preset].with_(**changes)


def check_flags(args: argparse.Namespace) -> None:
    """Flags that contradict each other: a one-line error before any work."""
    if args.staleness_bound is not None and not args.asynchronous:
        raise SystemExit("--staleness-bound needs --async (a synchronous parameter server is never stale)")
    refuse(STRATEGIES[args.parallel], args)


def run(task_class: Any, argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``lm``/``cnn``), train, and return the run's numbers and final parameters."""
    args = build_parser(task_class).parse_args(argv)
    preset, cfg = resolve(task_class, args)
    if args.print_config:
        settings = {"program": task_class.name, "preset": preset, "config": cfg.as_dict(), "flags": vars(args)}
        launched = os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0"))  # under mpiexec: rank 0
        if launched == "0":
            print(json.dumps(settings, indent=2))
        return settings
    validate_or_exit(args)  # every flag checked before anything is built: one line and exit 2 (train/checks.py)
    check_flags(args)
    minidl.manual_seed(args.seed)
    minidl.set_default_dtype(np.float64 if args.dtype == "float64" else np.float32)
    if args.parallel == "none":
        ctx = Context(SingleProcess())
    else:
        comm = dist.init(timeout=train_timeout())  # no rank waits forever: MINIDL_COMM_TIMEOUT, default 300 s
        ctx = Context(comm, comm.Get_rank(), comm.Get_size(), args.allreduce)

    def main() -> dict[str, Any]:
        return fit(task_class(args, cfg, preset), STRATEGIES[args.parallel](ctx, args), args, preset)

    return dist.run(main, comm=ctx.comm) if args.parallel != "none" else main()
