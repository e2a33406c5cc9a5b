"""Large global batches: the learning rate scaled with the batch and warmed up (``--lr-scaling``, ``--warmup-epochs``).

Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017:

- **linear scaling rule**: when the global batch grows k-fold, multiply the learning rate by k,
  ``k = global batch / base batch`` with ``global batch = batch per rank x ranks`` and ``base batch`` the batch
  the preset's rate was tuned for (``--base-batch``; default the preset's batch on one rank);
- **gradual warmup**: over the first K epochs ramp linearly from the small-batch rate (1/k of the scaled rate)
  up to the scaled rate, because the first steps of a large rate diverge:

      lr(t) = k * lr_task(t) * (s + (1 - s) * min(t / W, 1)),   W = K x steps per epoch,  s = 1/k

  (s = 0.1 when k = 1, so that ``--warmup-epochs`` alone still warms up). ``lr_task(t)`` is the task's own
  schedule (the CNN's cosine, the LM's decay), which keeps its shape.
"""

from __future__ import annotations

from typing import Any


def scale_factor(args: Any, cfg: Any, ranks: int, preset_batch: int) -> float:
    """k = global batch / base batch under ``--lr-scaling linear``, else 1."""
    if getattr(args, "lr_scaling", "none") != "linear":
        return 1.0
    base = getattr(args, "base_batch", None) or preset_batch
    return cfg.batch_size * ranks / base


def warmup_ramp(step: int, warmup_steps: int, k: float) -> float:
    """The factor s + (1 - s) * min(t / W, 1) of the module doc (1 when there is no warmup)."""
    if warmup_steps <= 0:
        return 1.0
    start = 1.0 / k if k > 1.0 else 0.1
    return start + (1.0 - start) * min(step / warmup_steps, 1.0)


def large_batch_lr(task: Any, args: Any, preset: str, ranks: int, step: int, per_epoch: int) -> float:
    """The learning rate of optimizer step ``step``: the task's, scaled and warmed up as the flags ask."""
    k = scale_factor(args, task.cfg, ranks, task.PRESETS[preset].batch_size)
    warmup_steps = round((getattr(args, "warmup_epochs", None) or 0.0) * per_epoch)
    return k * task.lr(step, per_epoch) * warmup_ramp(step, warmup_steps, k)
