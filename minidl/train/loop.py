"""The one training loop: ``fit(task, strategy, args, preset)`` trains any task under any ``--parallel`` mode.

    for each epoch:                              (until --max-steps or the last epoch)
        for each batch of this rank's share:     (task.batches: the LM's windows carry their LSTM state)
            set the learning rate                (task.lr of the step; --lr-scaling, --warmup-epochs)
            strategy.train_step(task, batch)     (forward, loss, backward, clip, update: the mode's own)
            every --log-every steps: a progress line (and a JSON record)
        evaluate, print, checkpoint              (what the task and the mode do at an epoch's end)
    strategy.finish(); evaluate on the test split; the score line and the mode's report

The task (``minidl.train.lm``, ``.cnn``) knows the data, the model, the loss and the scores; the strategy
(``minidl.train.strategies``) knows what this rank holds and how its ranks talk. Nothing here depends
on which they are.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import Any, TypeVar

import numpy as np

from minidl import startup
from minidl.distributed import checkpoint_schedule
from minidl.distributed.strategy import check_position
from minidl.distributed.usage import UsageExit, print_error
from minidl.optim.large_batch import large_batch_lr, scale_factor
from minidl.tools.progress import Progress, scalars
from minidl.train.interrupt import Watch, stop
from minidl.train.strategies import Position, Strategy

T = TypeVar("T")


class Task:
    """What every task shares: defaults for a task that carries no state between batches."""

    max_grad_norm: float | None = None
    tally_width = 2  # numbers a batch adds to the progress sums (``tally``)
    history_keys: tuple[str, ...] = ()  # what the history keeps of each progress record
    MODEL_FIELDS: tuple[str, ...] = ()  # the settings that shape the model's parameters (a resume compares them)
    lr_scale = 1.0  # --lr-scaling's factor: the header prints the rate in force
    batch_axis = 0  # the axis of a batch's arrays that runs over examples (the LM's: streams)

    def verdict(self, result: dict[str, Any]) -> list[str]:
        """Lines after the score that say what it means (the LM: how far from the optimum is good)."""
        return []

    def size_flags(self) -> str:
        """The flags that size the model, with their values (named when it does not fit in memory)."""
        return "its flags"

    @staticmethod
    def default_preset(args: Any, quick: bool) -> str:
        """The preset of a run without ``--preset``."""
        return "quick" if quick else "demo"

    def chain(self, model: Any) -> list[tuple[str, Any]]:
        """The model's units, the ones every strategy runs (cut or whole); remembered for the task's own use."""
        self.units = model.units()
        return self.units

    def start_window(self, again: bool = False) -> None:
        """A new batch begins (``again``: the same one, once more): where a task carries state, it moves on."""

    def set_slots(self, slots: int) -> None:
        """Carry ``slots`` states per batch, one per micro-batch (of a pipeline, or accumulated passes)."""

    def items(self, batch: Any) -> int:
        """Words (or images) in a batch: the unit of throughput."""
        return batch[1].size

    @classmethod
    def configured(cls, args: Any, cfg: Any, preset: str) -> Any:
        """The settings the run uses, where the data decides some (``--print-config``): here, the preset's."""
        return cfg

    def carried_state(self) -> dict[str, Any]:
        return {}

    def restore_state(self, saved: dict[str, Any]) -> None:
        pass

    def reshard_state(self, states: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
        """P ranks' carried states as ``size`` ranks' (nothing carried: nothing to cut)."""
        if any(states):
            raise ValueError(f"{type(self).__name__} cannot cut its carried state over another number of ranks")
        return [{} for _ in range(size)]


def fit(task: Any, strategy: Strategy, args: Any, preset: str) -> dict[str, Any]:
    """Train ``task`` under ``strategy``; returns the run's numbers, scores and final parameters."""
    agreed(strategy, lambda: split_global_batch(task, strategy, args))  # --global-batch N: N / ranks per rank
    if args.resume:  # another rank count: the per-rank batch that keeps the global one
        agreed(strategy, lambda: strategy.plan_resume(task))
    spe = task.prepare(strategy.shard)  # this rank's share of the data: steps per epoch
    model = agreed(strategy, task.model, memory=f"make it smaller ({task.size_flags()})")
    n_params = sum(p.data.size for p in model.parameters())
    strategy.build(task, model)
    epochs = task.cfg.epochs
    total = min(args.max_steps or epochs * spe, epochs * spe)
    resume = lambda: check_position(args.resume, strategy.resume(task, preset), spe, epochs)  # noqa: E731
    pos = agreed(strategy, resume) if args.resume else Position()
    log = Progress(task, strategy, args, spe, total, start=pos.step)
    task.lr_scale = scale_factor(args, task.cfg, strategy.replicas, task.PRESETS[preset].batch_size)
    title, lines = task.header(preset, n_params, spe, total if args.max_steps else None)
    lines += global_batch_lines(task, strategy, args, preset, total)
    lines += [f"resumed from {args.resume}: epoch {pos.epoch}, step {pos.step}"] if args.resume else []
    lines += [f"flags that change the run: {args.changes}"] if getattr(args, "changes", "") else []
    log.header(title, lines)
    clocks = (time.process_time(), time.perf_counter())  # this rank's share of a core while it trains (busy_note)
    watch = Watch(immediate=args.parallel == "ps")  # Ctrl-C: stop after a step the ranks agree on
    try:
        if strategy.serves:
            strategy.serve(task, spe)
            pos.step = total  # a server's steps are its workers'
        else:
            train_epochs(task, strategy, args, preset, pos, log, watch)
    finally:
        watch.close()  # a Ctrl-C from here on: startup.py's one line, and exit 130
    startup.phase("after training, during the final checkpoint and test evaluation (checkpoints written stay)")
    log.speed.pause()
    share = (time.process_time() - clocks[0]) / max(time.perf_counter() - clocks[1], 1e-9)
    if args.save:
        strategy.checkpoint(task, pos, preset, final=True)
    seconds = time.perf_counter() - log.started
    strategy.finish()
    scores = strategy.evaluate(task, "test")
    result = {"preset": preset, "parallel": args.parallel, "steps": pos.step, "epoch": pos.epoch, "seconds": seconds}
    result |= {f"{task.unit}_per_s": log.speed.overall(), "ranks": strategy.ctx.size, "history": log.history}
    result |= scores
    if "test" in log.history:
        log.history["test"].append((pos.epoch - (pos.window == 0), task.eval_text("test", scores)[0]))
    result["params"] = strategy.dense_params()
    record = {"kind": "eval", "split": "test", "step": pos.step, "epoch": pos.epoch, **scalars(scores, "test")}
    log.finish(result, record)
    for line in task.verdict(result) + busy_note(strategy, share):
        strategy.ctx.log(line)
    return result


def agreed(strategy: Strategy, action: Callable[[], T], memory: str = "") -> T:
    """``action()`` on every rank, and its value; where it raises on some rank a ValueError (a ``--resume`` or
    ``--global-batch`` this run cannot honour), or a MemoryError (a model too large: ``memory`` says what to do),
    the lowest such rank prints its one line and every rank exits 2. The ranks agree first (one sum), as a rank
    that failed alone would leave the others waiting in their next collective."""
    value, error = None, None
    try:
        value = action()
    except MemoryError as e:
        if not memory:
            raise
        error = f"the model does not fit in memory ({e}): {memory}"
    except ValueError as e:
        error = str(e)
    failed = strategy.ctx.sum([error is not None and r == strategy.ctx.rank for r in range(strategy.ctx.size)])
    if failed.any():
        if error is not None and strategy.ctx.rank == int(np.argmax(failed)):
            where = f"[rank {strategy.ctx.rank} of {strategy.ctx.size}] " if strategy.ctx.size > 1 else ""
            print_error(f"{where}python -m minidl.train: error: {error}")
        raise UsageExit()
    return value  # type: ignore[return-value]


def busy_note(strategy: Strategy, share: float, quiet: float = 0.8) -> list[str]:
    """The machine was busy (one line) where a rank had less than ``quiet`` of a core while it trained (its CPU
    time over the wall-clock time): other jobs, or more ranks than cores, took the rest, and the words/s are below
    what the machine does idle. Every rank calls it (one sum gathers the shares); nothing when all were quiet."""
    shares = strategy.ctx.sum([min(share, 1.0) if r == strategy.ctx.rank else 0.0 for r in range(strategy.ctx.size)])
    least = float(np.min(shares))
    if least >= quiet:
        return []
    load = f"load {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores, " if hasattr(os, "getloadavg") else ""
    who = "a rank" if strategy.ctx.size > 1 else "the process"
    return [
        f"the machine was busy: {who} had {100 * least:.0f}% of a core while it trained ({load}other jobs or more "
        "ranks than cores): the speed above is below what this machine does idle"
    ]


def split_global_batch(task: Any, strategy: Strategy, args: Any) -> None:
    """``--global-batch N``: each of the P data-parallel replicas takes N / P examples (LM: streams) per step, so
    the run takes one process's steps on one process's batches; the evaluation batch is divided likewise where it
    divides (the LM's test streams then are one process's too)."""
    n, replicas = getattr(args, "global_batch", None), strategy.replicas
    if n is None:
        return
    if n % replicas:
        raise ValueError(
            f"--global-batch {n} cannot be split into {replicas} equal per-rank batches (give a multiple of {replicas})"
        )
    task.cfg = task.cfg.with_(batch_size=n // replicas)
    if args.eval_batch_size % replicas == 0:
        args.eval_batch_size //= replicas


def global_batch_lines(task: Any, strategy: Strategy, args: Any, preset: str, total: int) -> list[str]:
    """Data parallelism's header: the global batch as ranks x per-rank batch, the optimizer steps it takes against
    one process's (whose batch is ``--global-batch``, else one rank's), and the learning-rate rule in force (Goyal et al. 2017)."""
    if args.parallel not in ("data", "zero"):
        return []
    P, b = strategy.replicas, task.cfg.batch_size
    base = getattr(args, "base_batch", None) or task.PRESETS[preset].batch_size  # the batch --lr is tuned for
    one_batch = getattr(args, "global_batch", None) or b  # the one process compared with: its batch
    one = min(task.steps_per_epoch(one_batch) * task.cfg.epochs, args.max_steps or 2**62)
    same = P * b == one_batch
    steps = (
        f"{total} optimizer steps, as one process" if same else f"{total} optimizer steps against {one} for one process"
    )
    rate = task.cfg.lr * task.lr_scale
    if getattr(args, "lr_scaling", "none") == "linear":
        rule = f"--lr-scaling linear: lr {task.cfg.lr:g} x {P * b}/{base} = {rate:g}"
    elif P * b == base:
        rule = f"lr {rate:g}, tuned for batch {base}"
    else:
        given = getattr(args, "global_batch", None)
        keep = "" if given else f"; --global-batch {base} keeps one process's batch and steps"
        rule = f"lr {rate:g}, tuned for batch {base}, not scaled (--lr-scaling linear scales it{keep})"
    return [f"global batch {P * b} = {P} x {b}: {steps}; {rule}"]


def train_epochs(
    task: Any, strategy: Strategy, args: Any, preset: str, pos: Position, log: Progress, watch: Watch
) -> None:
    """The epochs from ``pos`` on (a resumed run skips the windows it already trained on); after a Ctrl-C, the
    step the ranks agree on is saved and the run ends (``minidl.train.interrupt``)."""
    while pos.step < log.total:
        for batch in task.batches(pos.epoch, pos.window):
            log.lr = large_batch_lr(task, args, preset, strategy.ctx.size, pos.step, log.spe)
            strategy.set_lr(log.lr)
            loss = strategy.train_step(task, batch)
            pos.window, pos.step = pos.window + 1, pos.step + 1
            log.step(pos, batch, loss)
            after_step(task, strategy, args, preset, pos)
            if watch.agreed(strategy.ctx):
                stop(task, strategy, args, preset, pos, log)
            if pos.step >= log.total:
                break
        if pos.window < log.spe:
            break  # stopped by --max-steps mid-epoch
        log.speed.pause()
        split = task.epoch_split if pos.step < log.total or task.evaluates_last_epoch else None
        if split and strategy.evaluates_each_epoch:
            log.evaluation(pos, split, strategy.evaluate(task, split))
        pos.epoch, pos.window = pos.epoch + 1, 0
        if args.save:
            strategy.checkpoint(task, pos, preset, final=False)
        log.speed.resume()
        strategy.restart_clocks()


def after_step(task: Any, strategy: Strategy, args: Any, preset: str, pos: Position) -> None:
    """``--save-every N``: a checkpoint every N optimizer steps (the newest ``--keep`` kept);
    ``--inject-failure RANK:STEP``: that rank dies here, as a lost node would (once per job)."""
    every = getattr(args, "save_every", None)
    if every and pos.step % every == 0:
        path = checkpoint_schedule.scheduled_path(args.save, pos.step)
        strategy.checkpoint(task, pos, preset, final=False, path=path)
        if strategy.ctx.rank == 0:
            checkpoint_schedule.prune(args.save, args.keep, checkpoint_schedule.run_of_args(args))  # its own only
    failure = getattr(args, "inject_failure", None)
    if failure and failure == (strategy.ctx.rank, pos.step):
        checkpoint_schedule.die(args.save, strategy.ctx.rank, pos.step)
