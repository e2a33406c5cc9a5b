"""The command line of ``python -m minidl.train lm|cnn``: flags, the preset plus overrides, checks, and the run.

``run(task_class, argv)`` parses the flags, resolves the configuration (``--preset``, or ``quick`` with
``--quick``, with every flag given overriding its field; ``--print-config`` prints it and stops), refuses
flags the ``--parallel`` mode cannot honour (one line, before any work), seeds, joins the MPI job for a
parallel mode and calls ``fit``. In a parallel run an exception on any rank prints with its rank and
aborts the job (``dist.run``) instead of leaving the others waiting.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
from typing import Any, NoReturn

import numpy as np

import minidl
import minidl.distributed as dist
from minidl import startup
from minidl.distributed.pipeline.schedule import SCHEDULES
from minidl.distributed.timeout import train_timeout
from minidl.distributed.usage import launch_rank, print_error, validate_or_exit
from minidl.train import outputs
from minidl.train.checks import check_args
from minidl.train.loop import fit
from minidl.train.strategies import STRATEGIES, Context, SingleProcess

PROG = "python -m minidl.train"


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


PINT, PFLOAT, SWITCH = {"type": positive_int}, {"type": positive_float}, {"action": "store_true"}
FLAGS: dict[str, list[tuple[str, dict[str, Any], str]]] = {  # group -> (flag, add_argument's keywords, help)
    "run": [
        ("--epochs", PINT, "epochs to train (default: the preset's)"),
        ("--max-steps", PINT, "stop after this many optimizer steps in all (counting those before --resume)"),
        ("--lr", PFLOAT, "learning rate (default: the preset's)"),
        ("--batch-size", PINT, "examples (LM: streams) per rank per step"),
        ("--seed", {"type": int, "default": 0}, "seed of initialization, dropout and shuffling (default 0)"),
        ("--dtype", {"choices": ("float32", "float64"), "default": "float32"}, "parameter dtype"),
        ("--log-every", PINT, "optimizer steps between progress lines"),
        ("--log-json", {"metavar": "FILE"}, "also write every progress and evaluation record as a JSON line"),
        ("--print-config", SWITCH, "print the settings (preset + flags) and exit"),
        ("--save", {"metavar": "PATH"}, "write a checkpoint (.npz) after every epoch and at the end"),
        ("--resume", {"metavar": "PATH"}, "continue exactly from a checkpoint written by --save"),
        ("--save-every", PINT | {"metavar": "N"}, "also checkpoint every N steps beside --save (atomic)"),
        ("--keep", PINT | {"default": 3, "metavar": "K"}, "--save-every: keep the newest K (default 3)"),
        (
            "--inject-failure",
            {"type": rank_step, "metavar": "RANK:STEP"},
            "that rank dies at that step, once per job (tests)",
        ),
        ("--quick", SWITCH, "tiny data and model: finishes in seconds (tests)"),
    ],
    "large batches (Goyal et al. 2017)": [
        ("--lr-scaling", {"choices": ("none", "linear"), "default": "none"}, "linear: lr x global/base batch"),
        ("--base-batch", PINT | {"metavar": "N"}, "the global batch --lr is tuned for (the preset's batch)"),
        ("--global-batch", PINT | {"metavar": "N"}, "the batch of all ranks together, N / ranks each (one process's)"),
        ("--warmup-epochs", {"type": float, "metavar": "K"}, "ramp the lr up linearly over K epochs"),
    ],
    "parallelism (run under mpiexec -n P)": [
        ("--allreduce", {"choices": dist.ALGORITHMS, "default": "ring"}, "allreduce algorithm (default ring)"),
        ("--fusion-mb", {"type": float, "default": 64.0}, "gradient MiB per allreduce (0: one per tensor)"),
        ("--compression", {"choices": ("none", "fp16"), "default": "none"}, "gradients on the wire"),
        ("--overlap", SWITCH, "data: allreduce each bucket during backward (as DDP)"),
        ("--sparse-embedding", SWITCH, "data, lm: the embedding's gradient goes as its non-zero rows"),
        (
            "--zero-stage",
            {"type": int, "choices": (1, 2, 3)},
            "zero: shard optimizer state (1), + gradients (2), + params (3)",
        ),
        ("--timeline", {"metavar": "FILE"}, "data, zero: write a Chrome trace of every rank's steps"),
        ("--precision", {"choices": ("fp32", "fp16", "bf16"), "default": "fp32"}, "arithmetic, 16-bit emulated (fp32)"),
        ("--loss-scale", {"metavar": "dynamic|N"}, "loss scaling for fp16 (default dynamic with fp16)"),
        ("--baseline-wps", PFLOAT | {"metavar": "X"}, "one rank's words/s (images/s): prints the efficiency"),
    ],
    "pipeline (--parallel pipeline)": [
        ("--schedule", {"choices": SCHEDULES, "default": "1f1b"}, "pipeline schedule (default 1f1b)"),
        ("--micro-batches", {"type": int, "default": 4, "metavar": "M"}, "micro-batches per window (4)"),
        ("--pipeline-stages", {"type": int, "metavar": "PP"}, "stages per pipeline (all ranks); P/PP pipelines"),
    ],
    "parameter server / local SGD (--parallel ps|local-sgd)": [
        ("--servers", PINT | {"default": 1, "metavar": "S"}, "ps: server ranks 0..S-1 (default 1)"),
        ("--async", SWITCH | {"dest": "asynchronous"}, "ps: apply each gradient on arrival"),
        ("--fetch-every", PINT | {"default": 1, "metavar": "N"}, "ps --async: pull every N steps (default 1)"),
        ("--staleness-bound", {"type": int, "metavar": "s"}, "ps --async: refuse gradients over s updates old"),
        # a worker that really dies: only under mpiexec -disable-auto-cleanup (MPICH) do the others live on
        (
            "--drop-lost-workers",
            SWITCH,
            "ps: a worker silent MINIDL_COMM_TIMEOUT/2 is dropped, not fatal (a dead one: mpiexec -disable-auto-cleanup)",
        ),
        ("--average-every", PINT | {"default": 4, "metavar": "k"}, "local-sgd: average every k steps (4)"),
    ],
}


class Parser(argparse.ArgumentParser):
    """argparse, with a wrong flag told in one line, once per job (rank 0), with the nearest flag: under mpiexec
    every rank parses the same flags, and argparse's usage (30 lines) per rank buries the line that matters."""

    def error(self, message: str) -> NoReturn:
        flags = [o for action in self._actions for o in action.option_strings if o.startswith("--")]
        guesses = [
            f"did you mean {close[0]}?"
            for word in message.partition("arguments: ")[2].split()
            if word.startswith("--") and (close := difflib.get_close_matches(word.split("=")[0], flags, n=1))
        ]
        if launch_rank() == 0:
            hint = f" ({'; '.join(guesses)})" if guesses else ""
            print_error(f"{self.prog}: error: {message}{hint}; the flags: {self.prog} --help")
        raise SystemExit(2)


def build_parser(task: Any) -> argparse.ArgumentParser:
    """The flags of program ``task`` (a task class): its own, the run's, the ``--parallel`` modes'."""
    parser = Parser(prog=f"{PROG} {task.name}", description=task.__doc__)
    parser.add_argument("--preset", choices=sorted(task.PRESETS), help="settings (default: demo; quick with --quick)")
    task.add_arguments(parser)
    modes = "; ".join(
        f"{m}: {(STRATEGIES[m].__doc__ or '').splitlines()[0].rstrip('.')}" for m in ("none", *task.modes)
    )
    for title, flags in FLAGS.items():
        group = parser.add_argument_group(title)
        if title.startswith("parallelism"):
            group.add_argument("--parallel", choices=("none", *task.modes), default="none", help=modes)
        for flag, keywords, text in flags if "pipeline" in task.modes or "pipeline" not in title else ():
            group.add_argument(flag, help=text, **keywords)
    return parser


def resolve(task: Any, args: argparse.Namespace) -> tuple[str, Any]:
    """The preset's name and its configuration with every flag given (``task.OVERRIDES``: flag -> field)."""
    quick = args.quick or os.environ.get("MINIDL_QUICK") == "1"
    preset = args.preset or task.default_preset(args, quick)
    changes = {
        field: getattr(args, flag) for flag, field in task.OVERRIDES.items() if getattr(args, flag, None) is not None
    }
    return preset, task.PRESETS[preset].with_(**changes)


def changed_flags(parser: argparse.ArgumentParser, args: argparse.Namespace) -> str:
    """The flags given with a value other than their default, as typed (``--precision fp16 --sparse-embedding``),
    but those that only say where to write or how often to print: what the run header names."""
    words = []
    for action in parser._actions:
        value = getattr(args, action.dest, None)
        if not action.option_strings or action.dest in BOOKKEEPING or value is None or value == action.default:
            continue
        flag = action.option_strings[-1]
        words.append(
            flag if value is True else f"{flag} {':'.join(map(str, value)) if isinstance(value, tuple) else value}"
        )
    return " ".join(words)


BOOKKEEPING = {
    "help",
    "preset",
    "quick",
    "print_config",
    "log_every",
    "log_json",
    "save",
    "resume",
    "save_every",
    "keep",
}


def run(task_class: Any, argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``lm``/``cnn``), train, and return the run's numbers and final parameters."""
    parser = build_parser(task_class)
    args = parser.parse_args(argv)
    preset, cfg = resolve(task_class, args)
    if args.print_config:
        cfg = task_class.configured(args, cfg, preset)
        settings = {"program": task_class.name, "preset": preset, "config": cfg.as_dict(), "flags": vars(args)}
        if launch_rank() == 0:  # under mpiexec: rank 0 prints
            print(json.dumps(settings, indent=2))
        return settings
    validate_or_exit(args, check_args, PROG)  # every flag checked before anything is built: one line and exit 2
    validate_or_exit(args, outputs.claim, PROG)  # --save's lock, the run id, a --log-json that is a log
    args.argv = list(sys.argv[2:] if argv is None else argv)  # the flags, for the resume command after a Ctrl-C
    args.changes = changed_flags(parser, args)  # named in the run's header
    if args.staleness_bound is not None and not args.asynchronous:
        raise SystemExit("--staleness-bound needs --async (a synchronous parameter server is never stale)")
    minidl.manual_seed(args.seed)
    minidl.set_default_dtype(np.float64 if args.dtype == "float64" else np.float32)
    if args.parallel == "none":
        ctx = Context(SingleProcess())
    else:
        comm = dist.init(timeout=train_timeout())  # no rank waits forever: MINIDL_COMM_TIMEOUT, default 300 s
        ctx = Context(comm, comm.Get_rank(), comm.Get_size(), args.allreduce)
    startup.mpi_started()  # a Ctrl-C kept until every rank is past MPI_Init ends the run now

    def main() -> dict[str, Any]:
        return fit(task_class(args, cfg, preset), STRATEGIES[args.parallel](ctx, args), args, preset)

    try:
        return dist.run(main, comm=ctx.comm) if args.parallel != "none" else main()
    finally:
        outputs.release(args)
