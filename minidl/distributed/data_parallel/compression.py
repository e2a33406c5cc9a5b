"""Gradient compression for the wire: none, or float16 (half the bytes).

Illuminate, "Evaluating Parallel AI Training Using an HPC Facility" (c. 2020), reports mixed precision gave +74% on one GPU; on CPUs the gain of fp16 *gradients* is
communication volume: an allreduce moves 2 bytes per element instead of 4. Gradients are cast to
float16 before the allreduce and back to their own dtype after; the sum is done in float16, so it
loses precision (~3 significant digits). Each rank divides by P *before* the cast (the average is
the sum of g_r / P), so the sum stays below fp16's largest value, 65504, whenever the average does,
however many ranks add up; a sum that is still not finite is found after the allreduce (the same
on every rank) and raises, or skips the update with a warning (``overflow="skip"``, what a loss
scaler does). A gradient below float16's smallest value (6e-8) goes on the wire as 0: that is reported by an
``UnderflowWarning``, once a process. Off by default: the precision loss is real.
"""

from __future__ import annotations

import sys
import warnings
from typing import Any

import numpy as np

COMPRESSIONS = (None, "none", "fp16")
TINY = float(np.finfo(np.float16).smallest_subnormal)  # 6e-8: half of it and less round to 0


def check(compression: str | None) -> str | None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    return None if compression == "none" else compression


def compress(x: np.ndarray, compression: str | None) -> np.ndarray:
    """What goes on the wire for the buffer ``x`` (values that fp16 flushes to 0 are reported: report_underflow)."""
    if compression == "fp16" and x.dtype.kind == "f" and x.dtype != np.float16:
        out = x.astype(np.float16)
        report_underflow(x, out)
        return out
    return x


class UnderflowWarning(RuntimeWarning):
    """Gradients too small for float16 went on the wire as 0."""


_underflow_reported = False  # once a process: a gradient that underflows does so at every step


def report_underflow(x: np.ndarray, wire: np.ndarray) -> None:
    """Warn (once a process) when non-zero values of ``x`` became 0 in float16: below 6e-8, float16's smallest
    value, a gradient is lost without a trace (after the division by P, which makes it P times smaller).
    One pass over the float16 buffer, a second over the zeros only."""
    global _underflow_reported
    if _underflow_reported:
        return
    zeros = np.flatnonzero(wire == 0)
    flushed = x.reshape(-1)[zeros]
    lost = np.count_nonzero(flushed)
    if lost:
        _underflow_reported = True
        smallest = float(np.abs(flushed[flushed != 0]).min())
        warnings.warn(
            f"fp16 compression: {lost} of {x.size} gradient values of a bucket (the smallest {smallest:.3g}, after "
            f"the division by the number of ranks) are below float16's smallest value, {TINY:.3g}, and went on the "
            "wire as 0; scale the loss up (a loss scaler) or train without compression (reported once)",
            UnderflowWarning,
            stacklevel=2,
        )


def decompress(x: np.ndarray, dtype: np.dtype) -> np.ndarray:
    """Back to the gradients' own dtype."""
    return x if x.dtype == dtype else x.astype(dtype)


def report_overflow(index: int, bucket: Any, ranks: int, overflow: str) -> None:
    """A bucket whose fp16 sum is not finite: raise FloatingPointError naming it, or warn (``overflow="skip"``)."""
    shapes = [tuple(p.data.shape) for p in bucket.params[:4]]
    more = f" and {len(bucket.params) - 4} more" if len(bucket.params) > 4 else ""
    message = (
        f"fp16 compression: the allreduced gradients of bucket {index} (parameters of shapes {shapes}{more}) are "
        f"not finite: the average over {ranks} ranks exceeds float16's range (65504) or a gradient was inf/nan"
    )
    if overflow == "raise":
        raise FloatingPointError(message + "; lower the loss scale or learning rate, or train without --compression")
    print(f"warning: {message}; skipping this update", file=sys.stderr, flush=True)
