"""What a strategy is (one ``--parallel`` mode), and the serial one: one process, the whole model, every batch.

A strategy decides, for the one training loop (``minidl.train.loop.fit``):

- which share of the training data this rank takes (``shard``: index, count) and how many ranks train
  on different data (``replicas``: throughput = replicas x this rank's);
- what this rank holds (``build``: the net it runs, the optimizer of its parameters);
- one optimizer step (``train_step``: forward, loss, backward, clipping, update);
- how the model is scored (``evaluate``), what ends the run (``finish``) and what it adds to the report.

The optimizers share one protocol, ``zero_grad()``, ``step(closure=None)``, ``finish()``
(``Optimizer``, ``DistributedOptimizer``, ``LocalSGD``, ``PSWorker``), so no strategy asks which one it has.
Each scheme's strategy sits in the scheme's folder (``data_parallel/strategy.py``, ...); the loop picks one
by name from ``minidl.train.strategies.STRATEGIES``. Checkpoints record where the run stands in units of the
global batch (``position_units``), so a run of P ranks resumes at Q (``plan_resume``, ``reshard``).
"""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from collectives import MismatchError
from minidl import amp, optim
from minidl.distributed import checkpoint_schedule, lockstep
from minidl.distributed.comm import SingleProcess  # noqa: F401  (re-exported: the serial run's communicator)
from minidl.distributed.usage import print_error
from minidl.nn.container import Sequential
from minidl.nn.module import Module, StateDictError


@dataclass
class Context:
    """This process's communicator, rank and size, and the allreduce algorithm (``--allreduce``)."""

    comm: Any
    rank: int = 0
    size: int = 1
    algorithm: str = "ring"

    def log(self, *parts: Any) -> None:
        """Print on rank 0 only (flushed, so lines appear while mpiexec collects them)."""
        if self.rank == 0:
            print(*parts, flush=True)

    def sum(self, values: Sequence[float]) -> np.ndarray:
        """Elementwise sum of ``values`` over the ranks (a float64 vector; itself on one rank)."""
        x = np.asarray(values, dtype=np.float64)
        return dist.allreduce(self.comm, x, self.algorithm, "sum") if self.size > 1 else x


@dataclass
class Position:
    """Where training stands: the (1-based) epoch, the windows (batches) of it done, optimizer steps in all."""

    epoch: int = 1
    window: int = 0
    step: int = 0


class Strategy:
    """one process trains the whole model on every batch."""

    resizes = True  # a checkpoint of P ranks resumes at Q ranks (the same global batch, the same data order)
    serves = False  # True on a rank that serves requests instead of running the loop (parameter server)
    evaluates_each_epoch = True

    def __init__(self, ctx: Context, args: argparse.Namespace):
        self.ctx, self.args = ctx, args
        self.shard = (0, 1)  # this rank's share of the training data: (index, count)
        self.eval_share = (ctx.rank, ctx.size)  # and of the evaluation data (every rank holds the model)
        self.replicas, self.min_streams = 1, 1
        self.passes = 1  # backward passes per step: > 1 only to resume another size's global batch (plan_resume)
        self.reports = True  # this rank's loss counts in the reported loss
        self.log_rank = 0  # the rank that prints progress
        self.timeline: Any = None  # a dist.Timeline with --timeline (data-parallel modes)
        self.precision = getattr(args, "precision", "fp32")  # --precision: 16-bit arithmetic emulated (minidl.amp)
        self.scaler = make_scaler(self.precision, getattr(args, "loss_scale", None))

    def build(self, task: Any, model: Module) -> None:
        """Hold ``model`` whole: the net the loop runs, its parameters and their optimizer."""
        self.model, self.net = model, Sequential(*(unit for _, unit in task.chain(model)))  # the units in order
        self.params = list(model.parameters())
        self.base = task.optimizer(self.params)  # the local optimizer (learning rates are set on it)
        self.opt: Any = self.base
        if self.passes > 1:
            task.set_slots(self.passes)  # a carried state (LSTM) per pass

    def describe(self) -> list[str]:
        return []

    def set_lr(self, lr: float) -> None:
        for group in self.base.param_groups:
            group["lr"] = lr

    def criterion(self, task: Any, out: Any, batch: Any) -> Any:
        """The loss where this rank has one (None on a rank that holds no loss: it backpropagates ``out``)."""
        return task.criterion(out, batch)

    def clip(self, max_norm: float | None) -> None:
        if max_norm:
            optim.clip_grad_norm(self.params, max_norm)

    def train_step(self, task: Any, batch: Any) -> float | None:
        """One optimizer step on ``batch``; returns this rank's loss (None where there is none). With
        ``passes`` = A > 1 (a resume at another size, ``plan_resume``) the batch runs as A equal micro-batches whose
        gradients add up (each loss / A): the gradient of the whole batch's mean loss, in 1/A of the memory."""
        self.opt.zero_grad()
        losses = [self.backward_pass(task, part, k) for k, part in enumerate(self.micro_batches(task, batch))]
        loss = None if losses[0] is None else float(np.mean(losses))
        if self.scaler is not None and not self.unscale():
            return loss  # skipped: a gradient was inf or NaN on some rank
        with self.span("clip"):
            self.clip(task.max_grad_norm)
        with self.span("update"):
            self.update(task, batch)
        return loss

    def micro_batches(self, task: Any, batch: Any) -> list[Any]:
        """``batch`` as ``passes`` equal micro-batches along the task's ``batch_axis`` (the LM's: its streams)."""
        if self.passes == 1:
            return [batch]
        return list(zip(*(np.split(a, self.passes, axis=task.batch_axis) for a in batch)))

    def backward_pass(self, task: Any, batch: Any, k: int) -> float | None:
        """Forward and backward of pass ``k`` of a step (pass 0 starts the window; pass k runs on carried slot k)."""
        with self.span("forward"), amp.autocast(self.precision):
            out = task.forward(self.net, batch, start=k == 0)
            loss = self.criterion(task, out, batch)
        with self.span("backward"):
            (out if loss is None else self.scaled(loss if self.passes == 1 else loss * (1.0 / self.passes))).backward()
        return None if loss is None else float(loss.data)

    def scaled(self, loss: Any) -> Any:
        return loss if self.scaler is None else self.scaler.scale(loss)

    def unscale(self) -> bool:
        """Loss scaling: gradients back to their size; False (and the step skipped on every rank) on inf/NaN."""
        finite = self.scaler.unscale_(self.params)
        finite = bool(self.ctx.sum([0.0 if finite else 1.0])[0] == 0)  # every rank must take the same decision
        self.scaler._found_inf = not finite
        self.scaler.update()
        if not finite:
            self.opt.zero_grad()
            self.ctx.log(f"loss scale: a gradient was not finite, step skipped, scale now {self.scaler.scale_value:g}")
        return finite

    def span(self, name: str) -> Any:
        """A timeline span around a phase of the step (nothing without ``--timeline``)."""
        return self.timeline.span(name) if self.timeline is not None else contextlib.nullcontext()

    def update(self, task: Any, batch: Any) -> None:
        self.opt.step()

    def total(self, values: Sequence[float]) -> np.ndarray:
        """Progress sums over the ranks that train."""
        return self.ctx.sum(values)

    def eval_loss(self, task: Any, batch: Any) -> tuple[Any, Any]:
        """The output and loss of one evaluation batch (the loss None where this rank has none)."""
        out = task.forward(self.net, batch)
        return out, self.criterion(task, out, batch)

    def evaluate(self, task: Any, split: str) -> dict[str, Any]:
        """Score the model on ``split``: each rank its ``eval_share``, the sums added over the ranks."""
        return task.evaluate(self, split)

    def suffix(self) -> str:
        """What this mode adds to a progress line (bytes sent, ...)."""
        return ""

    def timings(self) -> dict[str, float] | None:
        """Mean seconds per step of compute / wait / communication since the last call, where measured."""
        return None

    def restart_clocks(self) -> None:
        """Start the step clocks again after evaluation or a checkpoint (neither is a step)."""

    def finish(self) -> None:
        self.opt.finish()

    def dense_params(self) -> dict[str, np.ndarray] | None:
        return {k: np.array(v, copy=True) for k, v in self.model.state_dict().items()}

    def report(self, result: dict[str, Any]) -> list[str]:
        """Lines after the score (bytes, staleness, bubble, step time); every rank calls it."""
        return [f"checkpoint: {self.args.save}"] if self.args.save else []

    # -- checkpoints: the model, optimizer, position and each rank's carried state (LSTM state, RNG)
    def checkpoint(self, task: Any, pos: Position, preset: str, final: bool, path: str | None = None) -> None:
        """Write the model, optimizer and the global position: epoch, window, step and the examples (LM: streams x
        windows) consumed, in units of the global batch (``settings``), so another rank count can resume it."""
        rank_state = {**task.carried_state(), "rng": dist.rng_state(minidl.default_generator())}
        units = position_units(task.cfg, self.ctx.size)  # what the position counts in
        state: dict[str, Any] = {"epoch": pos.epoch, "window": pos.window, "step": pos.step, "preset": preset}
        state |= {"settings": units, "examples": pos.step * units["global_batch"]}
        state["config"] = {k: v for k, v in task.cfg.as_dict().items() if isinstance(v, (int, float, str, bool))}
        state["program"] = task.name  # python -m minidl.train lm or cnn: a resume names another program's checkpoint
        state["run"] = checkpoint_schedule.run_of_args(self.args) or ""  # --keep, the launcher take only its own
        path = path or self.args.save
        try:
            dist.save_checkpoint(path, self.model, self.base, None, state, rank_state, comm=self.ctx.comm)
        except (OSError, MismatchError) as e:  # a full disk, on rank 0 (the others: MismatchError naming it)
            if isinstance(e, OSError):
                print_error(f"python -m minidl.train: error: {e}; the checkpoints written before it are intact")
            lockstep.forget()  # every rank stops here: no end of run to agree on
            raise WriteFailed() from None

    def plan_resume(self, task: Any) -> None:
        """Before the data is cut: a checkpoint of P ranks resumed at Q keeps its global batch G, each rank now
        taking G / Q of it (the LM's streams, the CNN's examples), so the data order goes on unchanged."""
        path, size = self.args.resume, self.ctx.size
        info = dist.checkpoint_info(path, comm=self.ctx.comm)
        self.saved = info["state"]  # its settings: a resume whose model differs names the difference (resume)
        saved, global_batch = info["world_size"], info["state"].get("settings", {}).get("global_batch")
        if saved == size or global_batch is None:
            return
        if not self.resizes:
            raise ValueError(
                f"--resume {path}: written by {saved} ranks; --parallel {self.args.parallel} resumes only at that size"
            )
        per_pass = self.args.batch_size or global_batch // size  # --batch-size: what one pass may hold
        if global_batch % (size * per_pass):
            given = (
                f" of --batch-size {self.args.batch_size} (nor into whole passes of it)" if self.args.batch_size else ""
            )
            raise ValueError(
                f"--resume {path}: the checkpoint's global batch of {global_batch} ({saved} ranks) cannot be split "
                f"into {size} equal per-rank batches{given}; resume on "
                f"{', '.join(str(q) for q in range(1, global_batch + 1) if global_batch % q == 0)} ranks"
            )
        self.passes = global_batch // (size * per_pass)
        if self.passes > 1 and getattr(self.args, "overlap", False):
            raise ValueError(
                f"--resume {path}: {self.passes} accumulated passes per step with --overlap: the buckets would be "
                f"sent after the first pass (drop --overlap, or --batch-size {global_batch // size} for one pass)"
            )
        task.cfg = task.cfg.with_(batch_size=global_batch // size)  # this rank's share of the data, as before
        passes = f", as {self.passes} accumulated passes of {per_pass}," if self.passes > 1 else ""
        self.ctx.log(
            f"resuming a {saved}-rank checkpoint at {size} ranks: {global_batch // size} per rank{passes} keeps the "
            f"global batch {global_batch}"
        )

    def reshard(self, task: Any, states: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
        """Rank 0, resuming P ranks' states at ``size``: the task's carried state cut again; rank r keeps saved
        rank r's random stream where there was one (dropout masks after a resize are not the uninterrupted run's)."""
        carried = task.reshard_state([{k: v for k, v in s.items() if k != "rng"} for s in states], size)
        rngs = [s.get("rng") for s in states]
        return [{**carried[r], **({"rng": rngs[r]} if r < len(rngs) else {})} for r in range(size)]

    def resume(self, task: Any, preset: str) -> Position:
        path = self.args.resume
        try:
            state, mine = dist.load_checkpoint(
                path, self.model, self.base, None, comm=self.ctx.comm, reshard=lambda st, n: self.reshard(task, st, n)
            )
        except StateDictError as e:  # on every rank alike: the checkpoint's parameters are not this model's
            raise ValueError(another_model(path, getattr(self, "saved", {}), task, e)) from None
        if state.get("preset", preset) != preset:
            raise ValueError(
                f"--resume {path}: the checkpoint was written with --preset {state['preset']}, this run has --preset {preset}"
            )
        check_resume_settings(path, state.get("settings", {}), position_units(task.cfg, self.ctx.size))
        if "rng" in mine:  # (a rank added by a resize keeps the stream reseed_per_rank gave it)
            try:
                dist.set_rng_state(minidl.default_generator(), mine.pop("rng"))
            except (ValueError, TypeError, KeyError) as e:  # a hand-edited file: name the field
                raise ValueError(
                    f"--resume {path}: field ranks/{self.ctx.rank}/rng is not a random generator's state "
                    f"({type(e).__name__}: {e})"
                ) from None
        pos = Position(*(whole_number(path, state, key) for key in ("epoch", "window", "step")))
        task.restore_state(mine if pos.window else {})
        return pos


def make_scaler(precision: str, loss_scale: str | None) -> amp.GradScaler | None:
    """``--loss-scale dynamic|N`` (dynamic by default with fp16, none with bf16 and fp32)."""
    if loss_scale is None:
        return amp.GradScaler() if precision == "fp16" else None
    if loss_scale == "dynamic":
        return amp.GradScaler()
    return amp.GradScaler(init_scale=float(loss_scale), dynamic=False)


def reseed_per_rank(seed: int, rank: int) -> None:
    """Each rank its own dropout stream; rank 0 keeps ``manual_seed(seed)``'s (so one rank draws as a serial run)."""
    if rank:
        minidl.manual_seed(int(np.random.SeedSequence([seed, rank]).generate_state(1)[0]))


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


def another_model(path: str, saved: dict[str, Any], task: Any, error: Exception) -> str:
    """Why a checkpoint's parameters do not fit the run's model, in the user's terms: another program's checkpoint
    (lm against cnn), or the model settings that differ, each with the flag that sets it (``task.MODEL_FIELDS``)."""
    config, program = saved.get("config", {}), saved.get("program")
    if program not in (None, task.name) or not set(task.MODEL_FIELDS) <= set(config):
        other = f"python -m minidl.train {program}" if program else "another program"
        return f"--resume {path}: the checkpoint holds a model of {other}, not of python -m minidl.train {task.name}"
    current, flags = task.cfg.as_dict(), {field: name for name, field in task.OVERRIDES.items()}
    differ = [k for k in task.MODEL_FIELDS if config[k] != current[k]]
    if not differ:
        return f"--resume {path}: the checkpoint's model does not fit this run's: {error}"
    what = ", ".join(f"{k} {config[k]} there, {current[k]} here" for k in differ)
    give = " ".join(f"--{flags[k].replace('_', '-')} {config[k]}" for k in differ if k in flags)
    how = f"resume with the flags it was written with: {give}" if give else "resume on the data it was written on"
    return f"--resume {path}: the checkpoint holds another model ({what}); {how}"


class WriteFailed(SystemExit):
    """A checkpoint could not be written (a full disk): its one line is printed; every rank ends with status 1 at
    the same point (``dist.run`` lets it through, as an agreed stop)."""

    ends_together = True

    def __init__(self) -> None:
        super().__init__(1)


def whole_number(path: str, state: dict[str, Any], key: str) -> int:
    """``state[key]`` of a checkpoint, an integer >= 0, else a ValueError naming the field."""
    value = state.get(key)
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0:
        raise ValueError(f"--resume {path}: field state/{key} = {value!r} is not an integer >= 0")
    return int(value)


def check_position(path: str, pos: Position, steps_per_epoch: int, epochs: int) -> Position:
    """A checkpoint's position must be one a run can reach: epoch 1..epochs + 1, window <= steps per epoch, and
    step = (epoch - 1) x steps per epoch + window (every epoch before it whole); else a ValueError naming the field
    (a hand-edited step of 1e9 would otherwise end the run at once with '1000000000 steps in 0:00')."""
    if not 1 <= pos.epoch <= epochs + 1:
        raise ValueError(f"--resume {path}: field state/epoch = {pos.epoch} is not in 1..{epochs + 1} (1-based)")
    if pos.window > steps_per_epoch:  # (= at an epoch's last step: --save-every or Ctrl-C there)
        raise ValueError(
            f"--resume {path}: field state/window = {pos.window} is past the {steps_per_epoch} steps of an epoch"
        )
    reached = (pos.epoch - 1) * steps_per_epoch + pos.window
    if pos.step != reached:
        raise ValueError(
            f"--resume {path}: field state/step = {pos.step} does not match epoch {pos.epoch}, window {pos.window} "
            f"(that is step {reached} at {steps_per_epoch} steps an epoch)"
        )
    return pos


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
