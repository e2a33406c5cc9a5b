"""Gradient compression for the wire: none, or float16 (half the bytes).

Illuminate, "Evaluating Parallel AI Training Using an HPC Facility" (c. 2020), reports mixed precision gave +74% on one GPU; on CPUs the gain of fp16 *gradients* is
communication volume: an allreduce moves 2 bytes per element instead of 4. Gradients are cast to
float16 before the allreduce and back to their own dtype after; the sum is done in float16, so it
loses precision (~3 significant digits). Each rank divides by P *before* the cast (the average is
the sum of g_r / P), so the sum stays below fp16's largest value, 65504, whenever the average does,
however many ranks add up; a sum that is still not finite is found after the allreduce (the same
on every rank) and raises, or skips the update with a warning (``overflow="skip"``, what a loss
scaler does). Off by default: the precision loss is real.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np

COMPRESSIONS = (None, "none", "fp16")


def check(compression: str | None) -> str | None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, got {compression!r}")
    return None if compression == "none" else compression


def compress(x: np.ndarray, compression: str | None) -> np.ndarray:
    """What goes on the wire for the buffer ``x``."""
    if compression == "fp16" and x.dtype.kind == "f" and x.dtype != np.float16:
        return x.astype(np.float16)
    return x


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
