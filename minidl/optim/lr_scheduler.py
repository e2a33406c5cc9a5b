"""Learning-rate schedules: each sets every group's ``lr`` from a closed-form function of the step count.

A scheduler remembers each group's starting rate (``base_lrs``, kept in the group as
``"initial_lr"`` so several schedulers on one optimizer agree on it) and, on ``step()``, advances
its counter t (``last_epoch``, PyTorch's name; an epoch or an iteration, as the caller steps it)
and sets ``group["lr"] = lr_at(t, base_lr)``. Construction applies t = 0.
Usage as in PyTorch: ``optimizer.step()`` in the loop, ``scheduler.step()`` after each epoch (or each
iteration for warmup); ``get_last_lr()`` gives the rates now in force.

Closed forms are used (not PyTorch's chained multiplications), so rates can differ from
``torch.optim.lr_scheduler`` in the last bits only.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from minidl.optim.optimizer import Optimizer


class LRScheduler:
    """Base class: subclasses define ``lr_at(t, base_lr)``, the rate after ``t`` calls of ``step()``."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__} needs an Optimizer, got {type(optimizer).__name__}")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        elif any("initial_lr" not in g for g in optimizer.param_groups):
            raise KeyError(f"{type(self).__name__}: resuming at last_epoch={last_epoch} needs 'initial_lr' in groups")
        self.base_lrs: list[float] = [float(g["initial_lr"]) for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._last_lr: list[float] = []
        self.step()

    def lr_at(self, t: int, base_lr: float) -> float:  # pragma: no cover - abstract
        raise NotImplementedError

    def step(self) -> None:
        """Advance the counter by one and set each group's learning rate."""
        self.last_epoch += 1
        self._apply(self.last_epoch)

    def _apply(self, t: int) -> None:
        for group, base in zip(self.optimizer.param_groups, self.base_lrs):
            group["lr"] = self.lr_at(t, base)
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The learning rate of each group, as last set by this scheduler."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Every attribute except the optimizer (numbers and lists only; ``minidl.save`` can write it)."""
        return {k: v for k, v in self.__dict__.items() if k != "optimizer" and not isinstance(v, LRScheduler)}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Restore the counter and settings; the optimizer's own state_dict restores the rates in force."""
        unknown = set(state_dict) - set(self.state_dict())
        if unknown:
            raise KeyError(f"{type(self).__name__}.load_state_dict: unexpected keys {sorted(unknown)}")
        self.__dict__.update({k: (list(v) if isinstance(v, tuple) else v) for k, v in state_dict.items()})


class StepLR(LRScheduler):
    """lr_t = base_lr * gamma^floor(t / step_size): decay by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1, last_epoch: int = -1):
        if int(step_size) < 1:
            raise ValueError(f"StepLR: step_size must be a positive integer, got {step_size}")
        self.step_size, self.gamma = int(step_size), float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        return base_lr * self.gamma ** (t // self.step_size)


class MultiStepLR(LRScheduler):
    """lr_t = base_lr * gamma^(number of milestones <= t), e.g. Goyal et al.'s decay at epochs 30, 60, 80."""

    def __init__(self, optimizer: Optimizer, milestones: Sequence[int], gamma: float = 0.1, last_epoch: int = -1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        return base_lr * self.gamma ** sum(1 for m in self.milestones if m <= t)


class ExponentialLR(LRScheduler):
    """lr_t = base_lr * gamma^t."""

    def __init__(self, optimizer: Optimizer, gamma: float, last_epoch: int = -1):
        self.gamma = float(gamma)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        return base_lr * self.gamma**t


class DelayedExponentialLR(LRScheduler):
    """Constant for ``delay`` epochs, then multiplied by ``gamma`` every epoch (Zaremba et al. 2014):

        lr_t = base_lr * gamma^max(0, t - delay + 1)        (t = 0, 1, ... counts epochs)

    so epochs 0 .. delay-1 train at base_lr and epoch ``delay`` at base_lr * gamma. Zaremba's settings:
    small lr 1, delay 4, gamma 0.5; medium delay 6, gamma 0.8; large delay 14, gamma 1/1.15.
    """

    def __init__(self, optimizer: Optimizer, gamma: float, delay: int, last_epoch: int = -1):
        if int(delay) < 0:
            raise ValueError(f"DelayedExponentialLR: delay must be >= 0, got {delay}")
        self.gamma, self.delay = float(gamma), int(delay)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        return base_lr * self.gamma ** max(0, t - self.delay + 1)


class LinearWarmup(LRScheduler):
    """Gradual warmup (Goyal et al. 2017): from ``start_factor * base_lr`` up to base_lr in ``warmup_steps`` steps:

        lr_t = base_lr * (start_factor + (1 - start_factor) * min(t, warmup_steps) / warmup_steps)

    then constant. Goyal et al. ramp from the small-batch rate eta to k*eta over 5 epochs:
    base_lr = k * eta, start_factor = 1 / k. Equals ``torch.optim.lr_scheduler.LinearLR``.
    """

    def __init__(self, optimizer: Optimizer, warmup_steps: int, start_factor: float = 0.1, last_epoch: int = -1):
        if int(warmup_steps) < 1:
            raise ValueError(f"LinearWarmup: warmup_steps must be >= 1, got {warmup_steps}")
        if not 0.0 <= float(start_factor) <= 1.0:
            raise ValueError(f"LinearWarmup: start_factor must be in [0, 1], got {start_factor}")
        self.warmup_steps, self.start_factor = int(warmup_steps), float(start_factor)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        frac = min(t, self.warmup_steps) / self.warmup_steps
        return base_lr * (self.start_factor + (1.0 - self.start_factor) * frac)


class CosineAnnealingLR(LRScheduler):
    """Cosine decay from base_lr to ``eta_min`` over ``T_max`` steps (Loshchilov & Hutter 2017, no restarts):

        lr_t = eta_min + (base_lr - eta_min) * (1 + cos(pi * min(t, T_max) / T_max)) / 2

    and eta_min after T_max (PyTorch's version would rise again along the cosine).
    """

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0, last_epoch: int = -1):
        if int(T_max) < 1:
            raise ValueError(f"CosineAnnealingLR: T_max must be >= 1, got {T_max}")
        self.T_max, self.eta_min = int(T_max), float(eta_min)
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        t = min(t, self.T_max)
        return self.eta_min + (base_lr - self.eta_min) * (1.0 + math.cos(math.pi * t / self.T_max)) / 2.0


class SequentialLR(LRScheduler):
    """Run ``schedulers[0]`` until ``milestones[0]``, then ``schedulers[1]`` from its own t = 0, and so on.

    Scheduler i sees t - milestones[i-1]. Build the schedulers on the same optimizer first
    (each one's construction sets the rates; this one then resets them to schedulers[0]'s at t = 0).
    """

    def __init__(
        self, optimizer: Optimizer, schedulers: Sequence[LRScheduler], milestones: Sequence[int], last_epoch: int = -1
    ):
        schedulers, milestones = list(schedulers), [int(m) for m in milestones]
        if not schedulers or len(milestones) != len(schedulers) - 1:
            raise ValueError(
                f"SequentialLR: need n >= 1 schedulers and n - 1 milestones, "
                f"got {len(schedulers)} and {len(milestones)}"
            )
        if milestones != sorted(milestones) or (milestones and milestones[0] < 0):
            raise ValueError(f"SequentialLR: milestones must be non-negative and increasing, got {milestones}")
        if any(s.optimizer is not optimizer for s in schedulers):
            raise ValueError("SequentialLR: every scheduler must drive the same optimizer as SequentialLR")
        self.schedulers, self.milestones = schedulers, milestones
        super().__init__(optimizer, last_epoch)

    def lr_at(self, t: int, base_lr: float) -> float:
        i = sum(1 for m in self.milestones if m <= t)
        start = self.milestones[i - 1] if i > 0 else 0
        return self.schedulers[i].lr_at(t - start, base_lr)

    def state_dict(self) -> dict[str, Any]:
        state = {k: v for k, v in super().state_dict().items() if k != "schedulers"}
        state["schedulers"] = [s.state_dict() for s in self.schedulers]
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        inner = state.pop("schedulers", [])
        if len(inner) != len(self.schedulers):
            raise ValueError(
                f"SequentialLR.load_state_dict: {len(inner)} schedulers saved, {len(self.schedulers)} here"
            )
        for s, sd in zip(self.schedulers, inner):
            s.load_state_dict(sd)
        super().load_state_dict(state)


def warmup_cosine(
    optimizer: Optimizer, warmup_steps: int, total_steps: int, start_factor: float = 0.1, eta_min: float = 0.0
) -> SequentialLR:
    """Linear warmup for ``warmup_steps`` steps, then cosine decay to ``eta_min`` at ``total_steps``."""
    if total_steps <= warmup_steps:
        raise ValueError(f"warmup_cosine: total_steps ({total_steps}) must exceed warmup_steps ({warmup_steps})")
    warmup = LinearWarmup(optimizer, warmup_steps, start_factor)
    cosine = CosineAnnealingLR(optimizer, total_steps - warmup_steps, eta_min)
    return SequentialLR(optimizer, [warmup, cosine], [warmup_steps])
