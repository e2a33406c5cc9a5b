"""Every flag of ``python -m minidl.train`` checked before anything is built: one line per mistake, exit 2.

A mistake found after the model is built, the data read and the ranks started costs minutes and
prints a traceback per rank; found here, it is one line::

    python -m minidl.train: error: --lr must be a finite number > 0, got inf

``check_args(args)`` raises ``UsageError`` for the first problem (``minidl.distributed.usage`` prints it once,
with the rank under mpiexec, and exits 2). It checks numbers (finite, in range), paths (``--data``
holds what the program reads, ``--save``, ``--log-json`` and ``--timeline`` can be written (their folders made), ``--resume`` exists) and flags that do not
apply to the chosen ``--parallel`` mode (each with the reason).
"""

from __future__ import annotations

import argparse
import math
import os
from typing import Any

from minidl.data.text import PTB_FILES, PTB_HINT
from minidl.distributed.timeout import timeout_from_env
from minidl.distributed.usage import UsageError
from minidl.train.outputs import OUTPUT_FLAGS, writable

IDX_FILES = [f"{kind}-{what}" for kind in ("train", "t10k") for what in ("images-idx3-ubyte", "labels-idx1-ubyte")]

__all__ = ["UsageError", "check_args"]

# flag: its default, the --parallel modes it applies to, and why
MODE_FLAGS: dict[str, tuple[Any, str, str]] = {
    "--allreduce": ("ring", "data zero local-sgd pipeline model tensor ps", "one process has nothing to reduce"),
    "--fusion-mb": (64.0, "data", "it sizes data parallelism's gradient allreduces"),
    "--compression": ("none", "data", "it compresses the gradient allreduces"),
    "--sync-bn": (False, "data zero", "batch statistics are shared only between data-parallel replicas"),
    "--overlap": (False, "data", "only DistributedOptimizer's bucket allreduces run during backward"),
    "--sparse-embedding": (False, "data", "only DistributedOptimizer exchanges the embedding gradient by rows"),
    "--zero-stage": (None, "zero", "only ZeRO shards the model's state"),
    "--timeline": (None, "data zero", "the timeline records data-parallel steps"),
    "--precision": ("fp32", "none data zero", "mixed precision is emulated in these modes"),
    "--lr-scaling": ("none", "none data zero", "the global batch is batch x ranks only here"),
    "--base-batch": (None, "none data zero", "it is the base of --lr-scaling"),
    "--global-batch": (None, "none data zero", "the global batch is batch x ranks only here"),
    "--servers": (1, "ps", "only a parameter server has servers"),
    "--async": (False, "ps", "only a parameter server applies gradients asynchronously"),
    "--fetch-every": (1, "ps", "only parameter-server workers fetch parameters"),
    "--drop-lost-workers": (False, "ps", "only a parameter server drops workers"),
    "--staleness-bound": (None, "ps", "only an asynchronous parameter server has staleness"),
    "--average-every": (4, "local-sgd", "only local SGD averages parameters every k steps"),
    "--schedule": ("1f1b", "pipeline", "only a pipeline has a schedule"),
    "--micro-batches": (4, "pipeline", "only a pipeline splits batches into micro-batches"),
    "--pipeline-stages": (None, "pipeline", "only a pipeline has stages"),
    "--resume": (None, "none data", "only these modes write checkpoints a run continues from"),
    "--save-every": (None, "none data", "only these modes write checkpoints a run continues from"),
    "--save": (None, "none data model tensor pipeline", "this mode writes no checkpoint"),
}
DESTS = {"--async": "asynchronous"}  # where a flag's argparse name is not the flag's own

finite = math.isfinite
POSITIVE = ("a finite number > 0", lambda v: finite(v) and v > 0)
NON_NEGATIVE = ("a finite number >= 0", lambda v: finite(v) and v >= 0)
AT_LEAST_1 = (">= 1", lambda v: v >= 1)
NUMBERS: dict[str, tuple[str, Any]] = {  # flag: what its value must be, and the test
    "--lr": POSITIVE,
    "--baseline-wps": POSITIVE,
    "--fusion-mb": NON_NEGATIVE,
    "--momentum": NON_NEGATIVE,
    "--weight-decay": NON_NEGATIVE,
    "--warmup-epochs": NON_NEGATIVE,
    "--dropout": ("in [0, 1)", lambda v: 0 <= v < 1),
    "--micro-batches": AT_LEAST_1,
    "--pipeline-stages": AT_LEAST_1,
    "--staleness-bound": (">= 0", lambda v: v >= 0),
    "--seed": ("an integer >= 0 (NumPy seeds no negative numbers)", lambda v: v >= 0),
}


def dest(flag: str) -> str:
    return DESTS.get(flag, flag[2:].replace("-", "_"))


def check_args(args: argparse.Namespace, root: bool = True) -> None:
    """Raise ``UsageError`` naming the first flag that is wrong (see the module doc). ``root``: this is the rank
    that writes ``--save`` and reads ``--resume`` (rank 0; the others need neither path)."""
    for flag, (what, ok) in NUMBERS.items():
        value = getattr(args, dest(flag), None)
        if value is not None and not ok(value):
            raise UsageError(f"{flag} must be {what}, got {value}")
    if getattr(args, "global_batch", None) is not None and getattr(args, "batch_size", None) is not None:
        raise UsageError("--global-batch and --batch-size: give one (--global-batch N is N / ranks per rank)")
    if getattr(args, "parallel", "none") != "none":
        try:
            timeout_from_env()  # the ranks' communication timeout, read when the job starts
        except ValueError as e:
            raise UsageError(str(e)) from None
    if getattr(args, "base_batch", None) is not None and getattr(args, "lr_scaling", "none") != "linear":
        raise UsageError("--base-batch needs --lr-scaling linear (it is the batch the rate is scaled from)")
    check_loss_scale(getattr(args, "loss_scale", None), getattr(args, "precision", "fp32"))
    if getattr(args, "sparse_embedding", False):
        if not hasattr(args, "text"):  # the language model's parser has --text; the CNN has no embedding
            raise UsageError("--sparse-embedding applies only to the language model (lm): this model has no embedding")
        if getattr(args, "compression", "none") != "none":
            raise UsageError(
                "--sparse-embedding sends rows in the gradient's dtype; it does not combine with --compression"
            )
    mode = getattr(args, "parallel", "none")
    for flag, (default, modes, why) in MODE_FLAGS.items():
        if getattr(args, dest(flag), default) != default and mode not in modes.split():
            where = modes.replace(" ", "/")
            raise UsageError(f"{flag} applies only to --parallel {where} ({why}), not to --parallel {mode}")
    check_paths(args, root)


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
        if not (finite(value) and value >= 1):
            raise UsageError(f"--loss-scale must be 'dynamic' or a number >= 1, got {loss_scale!r}")


def check_paths(args: argparse.Namespace, root: bool = True) -> None:
    data, text = getattr(args, "data", None), getattr(args, "text", None)
    if data is not None and hasattr(args, "text"):  # the language model's --data: a PTB directory
        missing = [f for f in PTB_FILES.values() if not os.path.isfile(os.path.join(data, f))]
        if not os.path.isdir(data) or missing:
            problem = "no such directory" if not os.path.isdir(data) else f"missing {', '.join(missing)}"
            raise UsageError(f"--data {data}: {problem}; {PTB_HINT}")
    elif data is not None:  # the CNN's --data: MNIST-format IDX files
        if not os.path.isdir(data):
            raise UsageError(f"--data {data}: no such directory")
        missing = [f for f in IDX_FILES if not any(os.path.isfile(os.path.join(data, f + gz)) for gz in ("", ".gz"))]
        if missing:
            raise UsageError(f"--data {data}: missing {', '.join(missing)} (MNIST-format IDX files, optionally .gz)")
    if text is not None and not os.path.isfile(text):
        raise UsageError(f"--text {text}: no such file")
    resume, save = getattr(args, "resume", None), getattr(args, "save", None)
    if not root:
        return
    if resume is not None and not os.path.isfile(resume):
        raise UsageError(f"--resume {resume}: no such checkpoint file")
    for flag in OUTPUT_FLAGS:  # their folders made, each writable: one line now, not a traceback mid-run
        path = getattr(args, dest(flag), None)
        if path is not None:
            writable(path, flag)
    if getattr(args, "save_every", None) and save is None:
        raise UsageError("--save-every needs --save PATH (the scheduled checkpoints are written beside it)")
