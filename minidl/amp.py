"""Mixed precision, emulated honestly on a CPU: fp16 and bf16 rounding, and dynamic loss scaling.

Mixed-precision training (Micikevicius et al., "Mixed Precision Training", 2018) keeps float32 master
weights, runs the forward and backward in a 16-bit format, and scales the loss so that small gradients
do not underflow. NumPy has no fast half-precision matmul, so minidl *emulates* the numerics and claims no
speed-up: inside ``autocast("fp16")`` every recorded op rounds its floating inputs and outputs to the
16-bit format (the values stay float32 arrays holding 16-bit-representable numbers), and its backward
rounds the gradients it passes on. What this shows is what the formats do to training:

    format   exponent  mantissa   largest     smallest normal   smallest subnormal
    fp16     5 bits    10 bits    65504       6.1e-5            6.0e-8
    bf16     8 bits    7 bits     3.4e38      1.2e-38           (flushed here)

fp16 has float32's precision cut to 11 bits *and* a narrow range: gradients below 6e-8 become 0
(underflow), above 65504 inf. bf16 keeps float32's range with 8 bits of precision: no underflow, coarser
numbers. Hence ``GradScaler`` for fp16, with PyTorch's rules: the loss is multiplied by a scale S (start
2^16) before backward, so the gradients are S times larger and clear the underflow; before the update
they are divided by S. If any is inf or NaN the step is skipped and S halved; after 2000 good steps in a
row S doubles. A scale that falls below 1 means the gradients overflow even unscaled: an error.

    with amp.autocast("fp16"):
        loss = loss_fn(model(x), y)
    scaler.scale(loss).backward()
    if scaler.unscale_(params):        # True when every gradient is finite
        opt.step()
    scaler.update()
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

PRECISIONS = ("fp32", "fp16", "bf16")
_state = threading.local()


def round_fp16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest float16 (ties to even; overflow to inf, underflow to 0), kept in x's dtype."""
    with np.errstate(over="ignore"):  # overflow to inf is the point
        return x.astype(np.float16).astype(x.dtype)


def round_bf16(x: np.ndarray) -> np.ndarray:
    """Round to the nearest bfloat16, the top 16 bits of a float32 (ties to even; inf and NaN kept)."""
    f = np.asarray(x, dtype=np.float32)
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000).astype(np.uint32).view(np.float32)
    out = np.where(np.isfinite(f), rounded, f)  # NaN payloads and infinities are not rounded into each other
    return out.astype(x.dtype, copy=False)


ROUND = {"fp16": round_fp16, "bf16": round_bf16}


def active() -> Any:
    """The rounding function of the enclosing ``autocast``, or None outside one."""
    return getattr(_state, "round", None)


@contextmanager
def autocast(precision: str = "fp16") -> Iterator[None]:
    """Ops recorded inside round their floating inputs and outputs (and, in backward, their gradients)."""
    if precision not in PRECISIONS:
        raise ValueError(f"precision must be one of {PRECISIONS}, got {precision!r}")
    before = active()
    _state.round = ROUND.get(precision)
    try:
        yield
    finally:
        _state.round = before


def rounded(arrays: Iterable[Any], fn: Any) -> tuple[Any, ...]:
    """Each floating ndarray of ``arrays`` rounded by ``fn`` (a new array); anything else as it is."""
    return tuple(fn(a) if isinstance(a, np.ndarray) and a.dtype.kind == "f" else a for a in arrays)


class LossScaleError(RuntimeError):
    """The dynamic loss scale fell below 1: the gradients overflow even without scaling."""


class GradScaler:
    """Dynamic loss scaling with PyTorch GradScaler's rules (init 2^16, x2 after 2000 good steps, x0.5 on inf/NaN).

    ``scale=N`` with ``dynamic=False`` keeps a fixed scale (``--loss-scale N``).
    """

    def __init__(
        self,
        init_scale: float = 2.0**16,
        growth_factor: float = 2.0,
        backoff_factor: float = 0.5,
        growth_interval: int = 2000,
        dynamic: bool = True,
    ):
        if not init_scale > 0:
            raise ValueError(f"GradScaler: the scale must be positive, got {init_scale}")
        self.scale_value, self.dynamic = float(init_scale), dynamic
        self.growth_factor, self.backoff_factor, self.growth_interval = growth_factor, backoff_factor, growth_interval
        self.good_steps, self.skipped = 0, 0
        self._found_inf = False

    def scale(self, loss: Any) -> Any:
        """The loss times the scale (backward of it gives scaled gradients)."""
        return loss * self.scale_value

    def unscale_(self, params: Iterable[Any]) -> bool:
        """Divide every gradient by the scale; True when all are finite (else the step must be skipped)."""
        inv, finite = 1.0 / self.scale_value, True
        for p in params:
            if p.grad is not None:
                p.grad *= inv
                finite = finite and bool(np.isfinite(p.grad).all())
        self._found_inf = not finite
        return finite

    def update(self) -> None:
        """After each step: back off and count a skip on inf/NaN, grow after ``growth_interval`` good steps."""
        if self._found_inf:
            self.skipped += 1
            self.good_steps = 0
            if self.dynamic:
                self.scale_value *= self.backoff_factor
                if self.scale_value < 1.0:
                    raise LossScaleError(
                        f"the loss scale fell to {self.scale_value:g} (< 1) after {self.skipped} skipped steps: the "
                        "gradients are not finite even unscaled (a learning rate too high, or a model that diverged)"
                    )
        elif self.dynamic:
            self.good_steps += 1
            if self.good_steps == self.growth_interval:
                self.scale_value *= self.growth_factor
                self.good_steps = 0
        self._found_inf = False
