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

import time
from typing import Any

from minidl.distributed import checkpoint_schedule
from minidl.distributed.usage import UsageExit, print_error
from minidl.optim.large_batch import large_batch_lr
from minidl.progress import Progress, scalars
from minidl.train.interrupt import Watch, stop
from minidl.train.strategies import Position, Strategy


class Task:
    """What every task shares: defaults for a task that carries no state between batches."""

    max_grad_norm: float | None = None
    tally_width = 2  # numbers a batch adds to the progress sums (``tally``)
    history_keys: tuple[str, ...] = ()  # what the history keeps of each progress record
    batch_axis = 0  # the axis of a batch's arrays that runs over examples (the LM's: streams)

    def size_flags(self) -> str:
        """The flags that size the model, with their values (named when it does not fit in memory)."""
        return "its flags"

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
    if args.resume:
        strategy.plan_resume(task)  # another rank count: the per-rank batch that keeps the global one
    spe = task.prepare(strategy.shard)  # this rank's share of the data: steps per epoch
    model = build_model(task, strategy)
    n_params = sum(p.data.size for p in model.parameters())
    strategy.build(task, model)
    epochs = task.cfg.epochs
    total = min(args.max_steps or epochs * spe, epochs * spe)
    pos = strategy.resume(task, preset) if args.resume else Position()
    log = Progress(task, strategy, args, spe, total, start=pos.step)
    title, lines = task.header(preset, n_params, spe, total if args.max_steps else None)
    lines += [f"resumed from {args.resume}: epoch {pos.epoch}, step {pos.step}"] if args.resume else []
    lines += [f"flags that change the run: {args.changes}"] if getattr(args, "changes", "") else []
    log.header(title, lines)
    watch = Watch(immediate=args.parallel == "ps")  # Ctrl-C: stop after a step the ranks agree on
    try:
        if strategy.serves:
            strategy.serve(task, spe)
            pos.step = total  # a server's steps are its workers'
        else:
            train_epochs(task, strategy, args, preset, pos, log, watch)
    finally:
        watch.close()
    log.speed.pause()
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
    return result


def build_model(task: Any, strategy: Strategy) -> Any:
    """``task.model()``; where it does not fit in memory (``--hidden-size 100000000``), one line naming the flags
    that size it, and exit 2 on every rank: the ranks agree first (one sum), as a rank that failed alone would
    leave the others waiting in their first collective."""
    model, error = None, None
    try:
        model = task.model()
    except MemoryError as e:
        error = f"the model does not fit in memory ({e}): make it smaller ({task.size_flags()})"
    if strategy.ctx.sum([error is not None])[0]:
        if error is not None:
            where = f"[rank {strategy.ctx.rank} of {strategy.ctx.size}] " if strategy.ctx.size > 1 else ""
            print_error(f"{where}python -m minidl.train: error: {error}")
        raise UsageExit()
    return model


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
            checkpoint_schedule.prune(args.save, args.keep)
    failure = getattr(args, "inject_failure", None)
    if failure and failure == (strategy.ctx.rank, pos.step):
        checkpoint_schedule.die(args.save, strategy.ctx.rank, pos.step)
