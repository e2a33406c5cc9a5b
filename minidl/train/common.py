"""What both training programs share: arguments, ranks, progress lines, checkpoints, evaluation sums.

A run is serial (one process, no MPI import at all) or data-parallel (``--parallel data`` under
``mpiexec``: every rank holds the model, trains on its own share of each batch, and the gradients
are averaged by ``minidl.distributed.DistributedOptimizer`` before each update). The batch size
given on the command line is **per rank** (Horovod's convention, weak scaling): P ranks with batch
b train with a global batch of P*b, and words/s (or images/s) per rank stay comparable across P,
so scaling efficiency = per-rank throughput at P ranks / throughput of one rank (``--baseline-wps``).

Only rank 0 prints. Checkpoints have the layout of ``minidl.distributed.save_checkpoint`` in both
modes (a serial run is the one-rank case), so a resumed run continues exactly where it stopped.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from minidl.distributed.data_parallel.timing import PHASES
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer
from minidl.train.checks import train_timeout, validate_or_exit


# ----------------------------------------------------------------------------- arguments
def positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be a positive integer, got {text}")
    return value


def positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


PARALLEL_HELP = {
    "data": "'data': average gradients over the ranks (Horovod-style)",
    "model": "'model': consecutive layers on consecutive ranks (minidl/distributed/model_parallel/layerwise.py)",
    "tensor": "'tensor': Megatron-style split of the output layer (minidl/distributed/model_parallel/tensor_parallel.py)",
    "pipeline": "'pipeline': layer pipelining over micro-batches, GPipe or 1F1B (minidl/train/pipeline.py)",
    "ps": "'ps': parameter server, sync or --async (minidl/distributed/parameter_server/)",
    "local-sgd": "'local-sgd': average the parameters every k steps (minidl/distributed/data_parallel/local_sgd.py)",
}


def split_program(mode: str, kind: str) -> Callable[..., dict[str, Any]] | None:
    """The training function of a ``--parallel`` mode that runs its own program (``kind``: "lm" or "cnn"),
    or None where ``lm.train``/``cnn.train`` run it themselves (none, data, pipeline)."""
    if mode in ("model", "tensor"):  # one model split over the ranks
        from minidl.train import model_parallel as program
    elif mode in ("ps", "local-sgd"):  # parameter server or local SGD
        from minidl.train import schemes as program
    else:
        return None
    return getattr(program, f"train_{kind}")


def add_common_arguments(parser: argparse.ArgumentParser, modes: Sequence[str] = ("none", "data")) -> None:
    """Flags every program takes: length of the run, checkpoints, numerics, and parallelism (``modes``:
    the values of ``--parallel`` the program supports; "data" is handled here, others by the program)."""
    run = parser.add_argument_group("run")
    run.add_argument("--epochs", type=positive_int, help="epochs to train (default: the preset's)")
    run.add_argument(
        "--max-steps",
        type=positive_int,
        help="stop after this many optimizer steps in all (counting those before a --resume)",
    )
    run.add_argument("--lr", type=positive_float, help="learning rate (default: the preset's)")
    run.add_argument("--batch-size", type=positive_int, help="examples (LM: streams) per rank per step")
    run.add_argument("--seed", type=int, default=0, help="seed of initialization, dropout and shuffling (default 0)")
    run.add_argument("--dtype", choices=("float32", "float64"), default="float32", help="parameter dtype")
    run.add_argument("--log-every", type=positive_int, help="optimizer steps between progress lines")
    run.add_argument("--save", metavar="PATH", help="write a checkpoint (.npz) after every epoch and at the end")
    run.add_argument("--resume", metavar="PATH", help="continue exactly from a checkpoint written by --save")
    run.add_argument("--quick", action="store_true", help="tiny data and model: finishes in seconds (tests)")

    par = parser.add_argument_group("parallelism (run under mpiexec -n P)")
    par.add_argument(
        "--parallel",
        choices=tuple(modes),
        default="none",
        help="; ".join(PARALLEL_HELP[m] for m in modes if m in PARALLEL_HELP),
    )
    par.add_argument("--allreduce", choices=dist.ALGORITHMS, default="ring", help="allreduce algorithm (default ring)")
    par.add_argument(
        "--fusion-mb",
        type=float,
        default=64.0,
        help="tensor fusion: gradient MiB packed per allreduce (0: one per parameter)",
    )
    par.add_argument("--compression", choices=("none", "fp16"), default="none", help="gradients on the wire")
    par.add_argument(
        "--baseline-wps",
        type=positive_float,
        metavar="X",
        help="throughput of one rank alone (words/s or images/s): prints the scaling efficiency",
    )


def apply_overrides(config: Any, args: argparse.Namespace, mapping: dict[str, str]) -> Any:
    """``config.with_(field=value)`` for every command-line flag given (``mapping``: arg name -> field)."""
    changes = {fld: getattr(args, arg) for arg, fld in mapping.items() if getattr(args, arg, None) is not None}
    return config.with_(**changes) if changes else config


def quick_requested(args: argparse.Namespace) -> bool:
    return bool(args.quick or os.environ.get("MINIDL_QUICK") == "1")


# ----------------------------------------------------------------------------- ranks
class SingleProcess:
    """The one-rank communicator of a serial run: enough of mpi4py's interface for the checkpoint
    functions of ``minidl.distributed`` (which send nothing when there is one rank), and no MPI."""

    def Get_rank(self) -> int:  # noqa: N802 - mpi4py's names
        return 0

    def Get_size(self) -> int:  # noqa: N802
        return 1

    def Barrier(self) -> None:  # noqa: N802
        pass


@dataclass
class Context:
    """Where this process stands: its communicator, rank and size, the ``--parallel`` mode, and the
    allreduce algorithm."""

    comm: Any
    rank: int = 0
    size: int = 1
    mode: str = "none"
    algorithm: str = "ring"

    @property
    def parallel(self) -> bool:
        """Data parallel: replicas of the whole model, gradients averaged (what this module sets up)."""
        return self.mode == "data"

    @property
    def distributed(self) -> bool:
        """Any MPI job (data or pipeline parallel): a failure on one rank must abort them all."""
        return self.mode != "none"

    @property
    def is_root(self) -> bool:
        return self.rank == 0

    def log(self, *parts: Any) -> None:
        """Print on rank 0 only (flushed, so lines appear while mpiexec collects them)."""
        if self.is_root:
            print(*parts, flush=True)

    def sum(self, values: Sequence[float]) -> np.ndarray:
        """Elementwise sum of ``values`` over the ranks (a float64 vector; itself on one rank)."""
        x = np.asarray(values, dtype=np.float64)
        return dist.allreduce(self.comm, x, self.algorithm, "sum") if self.size > 1 else x


def setup(args: argparse.Namespace) -> Context:
    """Seed, set the dtype and, for ``--parallel data`` (or another parallel mode), join the MPI job."""
    minidl.manual_seed(args.seed)
    minidl.set_default_dtype(np.float64 if args.dtype == "float64" else np.float32)
    if args.parallel != "none":
        comm = dist.init(timeout=train_timeout())  # no rank waits forever: MINIDL_COMM_TIMEOUT, default 300 s
        return Context(comm, comm.Get_rank(), comm.Get_size(), args.parallel, args.allreduce)
    return Context(SingleProcess())


def start_replicas(ctx: Context, model: Module, seed: int) -> None:
    """Make every replica start from rank 0's weights, then give each rank its own dropout stream.

    Rank 0 keeps the stream ``manual_seed(seed)`` started (so a one-rank parallel run draws what a
    serial run draws); rank r > 0 reseeds from (seed, r).
    """
    if ctx.parallel:
        dist.broadcast_parameters(model, root=0, comm=ctx.comm)
        if ctx.rank:
            minidl.manual_seed(int(np.random.SeedSequence([seed, ctx.rank]).generate_state(1)[0]))


def wrap_optimizer(ctx: Context, opt: Optimizer, args: argparse.Namespace) -> Optimizer:
    """The optimizer itself on one process; a ``DistributedOptimizer`` around it under ``--parallel data``."""
    if not ctx.parallel:
        return opt
    return dist.DistributedOptimizer(
        opt,
        allreduce=args.allreduce,
        fusion_bytes=int(args.fusion_mb * 2**20),
        compression=None if args.compression == "none" else args.compression,
        comm=ctx.comm,
    )


def synchronize(opt: Optimizer) -> None:
    """Average the gradients over the ranks now (before clipping, which must see the averaged ones)."""
    if isinstance(opt, dist.DistributedOptimizer):
        opt.synchronize()


def set_lr(opt: Optimizer, lr: float) -> None:
    for group in opt.param_groups:
        group["lr"] = lr


def run_program(
    args: argparse.Namespace, train: Callable[..., dict[str, Any]], presets: dict[str, Any], overrides: dict[str, str]
) -> dict[str, Any]:
    """Set up (seed, dtype, ranks), pick the preset (``demo``, or ``quick`` with --quick), apply the flags that
    override its fields, and call ``train(ctx, args, preset_name, config)``. In a parallel run an exception
    on any rank prints with its rank and aborts the job (``dist.run``) instead of leaving the others waiting."""
    validate_or_exit(args)  # every flag checked before anything is built: one line and exit 2 (train/checks.py)
    ctx = setup(args)
    preset = args.preset or ("quick" if quick_requested(args) else "demo")
    config = apply_overrides(presets[preset], args, overrides)
    main = lambda: train(ctx, args, preset, config)
    return dist.run(main, comm=ctx.comm) if ctx.distributed else main()


# ----------------------------------------------------------------------------- checkpoints
def snapshot(model: Module) -> dict[str, np.ndarray]:
    """Copies of the model's parameters and buffers (what a program returns to its caller)."""
    return {k: np.array(v, copy=True) for k, v in model.state_dict().items()}


def save_checkpoint(
    ctx: Context,
    path: str,
    model: Module,
    opt: Optimizer,
    state: dict[str, Any],
    rank_state: dict[str, Any],
    scheduler: Any = None,
) -> None:
    """Rank 0 writes model, optimizer and ``state``; every rank's ``rank_state`` (its RNG, its LSTM
    state) is gathered beside them. The library's RNG state is added to ``rank_state`` here."""
    rank_state = {**rank_state, "rng": dist.rng_state(minidl.default_generator())}
    inner = opt.optimizer if isinstance(opt, dist.DistributedOptimizer) else opt
    dist.save_checkpoint(path, model, inner, scheduler, state=state, rank_state=rank_state, comm=ctx.comm)


def load_checkpoint(
    ctx: Context,
    path: str,
    model: Module,
    opt: Optimizer,
    scheduler: Any = None,
    preset: str | None = None,
    settings: dict[str, int] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore what ``save_checkpoint`` wrote; returns (shared state, this rank's state), RNG already restored.

    ``settings``: what the saved data position is counted in (``RESUME_SETTINGS``), saved with the state
    under "settings"; a run that differs in one of them would continue at another place in the data, so
    it is refused naming the flag."""
    inner = opt.optimizer if isinstance(opt, dist.DistributedOptimizer) else opt
    state, mine = dist.load_checkpoint(path, model, inner, scheduler, comm=ctx.comm)
    if preset is not None and state.get("preset", preset) != preset:
        raise ValueError(
            f"--resume {path}: the checkpoint was written with --preset {state['preset']}, "
            f"this run has --preset {preset}"
        )
    check_resume_settings(path, state.get("settings", {}), settings or {})
    if "rng" in mine:
        dist.set_rng_state(minidl.default_generator(), mine["rng"])
    return state, mine


# what a saved data position is counted in, and the flags that set it
RESUME_SETTINGS = {
    "num_steps": "--num-steps (the BPTT window: the saved position counts windows of this many words)",
    "streams": "--batch-size x ranks (the streams the corpus is cut into)",
    "global_batch": "--batch-size x ranks (the global batch: the saved position counts global batches)",
}


def check_resume_settings(path: str, saved: dict[str, Any], current: dict[str, int]) -> None:
    """Refuse a resume whose data position would mean another place in the data (naming the setting)."""
    for key, value in current.items():
        if key in saved and int(saved[key]) != int(value):
            raise ValueError(
                f"--resume {path}: the checkpoint was written with {key} = {int(saved[key])}, this run has {value}: "
                f"{RESUME_SETTINGS.get(key, key)} must be the checkpoint's to continue exactly where it stopped"
            )


# ----------------------------------------------------------------------------- progress
def format_duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


@dataclass
class Throughput:
    """Items (words or images) per second between two progress lines, global and per rank.

    Every rank processes the same number of items per step, so the global rate is P times the
    rate rank 0 measures. ``baseline``: one rank's rate alone, for the weak-scaling efficiency.
    """

    unit: str
    size: int = 1
    baseline: float | None = None
    items: int = 0  # since the last progress line, on this rank
    seconds: float = 0.0
    total_items: int = 0  # before the last progress line
    total_seconds: float = 0.0
    _start: float = field(default_factory=time.perf_counter)

    def pause(self) -> None:
        """Stop the clock (evaluation and checkpoints are not training throughput)."""
        self.seconds += time.perf_counter() - self._start

    def resume(self) -> None:
        self._start = time.perf_counter()

    def add(self, items: int) -> None:
        self.items += items

    def overall(self) -> float:
        """Global items/s over the whole run so far (paused time excluded); call after ``pause()``."""
        return self.size * (self.total_items + self.items) / max(self.total_seconds + self.seconds, 1e-9)

    def format(self, per_rank: float) -> str:
        """ "G units/s (R/rank, efficiency E%)": global rate, per-rank rate, and per-rank / baseline."""
        text = f"{per_rank * self.size:,.0f} {self.unit}/s"
        if self.size > 1 or self.baseline:
            text += f" ({per_rank:,.0f}/rank"
            if self.baseline:
                text += f", efficiency {100 * per_rank / self.baseline:.0f}%"
            text += ")"
        return text

    def take(self) -> str:
        """The rate since the last call, as text; starts the next interval."""
        self.pause()
        text = self.format(self.items / max(self.seconds, 1e-9))
        self.total_items += self.items
        self.total_seconds += self.seconds
        self.items, self.seconds = 0, 0.0
        self.resume()
        return text


class TimingWindow:
    """The compute / wait / communication split of the steps since the last call (parallel runs)."""

    def __init__(self, opt: Optimizer):
        self.timings = opt.timings if isinstance(opt, dist.DistributedOptimizer) else None
        self._total = dict.fromkeys(PHASES, 0.0)
        self._steps = 0

    def take(self) -> str:
        if self.timings is None:
            return ""
        t = self.timings
        delta = {k: t.total[k] - self._total[k] for k in PHASES}
        steps = t.steps - self._steps
        self._total, self._steps = dict(t.total), t.steps
        if steps == 0:
            return ""
        per_step = sum(delta.values()) / steps
        parts = " ".join(f"{k[:4]} {100 * v / max(sum(delta.values()), 1e-12):.0f}%" for k, v in delta.items())
        return f" | {1e3 * per_step:.0f} ms/step: {parts}"


def restart_clocks(opt: Optimizer, throughput: Throughput) -> None:
    """Start the training clocks again after evaluation or a checkpoint (neither counts as a step)."""
    throughput.resume()
    if isinstance(opt, dist.DistributedOptimizer):
        opt.timings.restart()


def print_footer(
    ctx: Context, opt: Optimizer, args: argparse.Namespace, score: str, steps: int, seconds: float, speed: Throughput
) -> None:
    """The final line (``score``, steps, time, throughput), then for a parallel run the mean compute / wait /
    communication split of a step, and where the checkpoint is."""
    ranks = f" on {ctx.size} ranks" if ctx.size > 1 else ""
    ctx.log(f"{score} | {steps} steps in {format_duration(seconds)}{ranks}, {speed.format(speed.overall() / ctx.size)}")
    if isinstance(opt, dist.DistributedOptimizer) and opt.timings.steps:
        ctx.log(f"step time, {opt.timings.summary()}")
    if args.save:
        ctx.log(f"checkpoint: {args.save}")


def print_header(ctx: Context, title: str, lines: Sequence[str]) -> None:
    ctx.log(title)
    for line in lines:
        ctx.log(f"  {line}")
    if ctx.parallel:
        ctx.log(f"  data parallel: {ctx.size} ranks, allreduce={ctx.algorithm}")
    sys.stdout.flush()
