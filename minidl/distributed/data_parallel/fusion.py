"""Step 2 of data parallelism, tensor fusion: many small gradients packed into a few large buffers, one allreduce each.

Every allreduce pays a latency (alpha) per message round whatever its size, so allreducing the
~10 gradient arrays of an LSTM LM one by one pays it ~10 times; packed into one buffer it is paid
once and the transfer runs at full bandwidth (Horovod's "tensor fusion", Sergeev & Del Balso 2018).

A ``Bucket`` is a run of consecutive parameters of one dtype whose gradients fill at most
``fusion_bytes`` (a single larger gradient gets a bucket to itself). The plan is made from the
optimizer's parameter order, which is the same on every rank, so every rank packs the same
layout and the allreduces match element for element.

Layout of a bucket's buffer (one dtype)::

    [ grad of p0 (flattened) | grad of p1 | ... | present(p0) present(p1) ... ]

A parameter marked ``sparse_grad`` (``nn.Embedding(sparse=True)``'s weight) gets a bucket of its own
with ``rows=True`` when the plan is made with ``rows=True``: its non-zero rows are allgathered instead
(sparse_rows.py), and only when they are too many to gain is it packed here, like any other bucket.

``present(p)`` is 1 where this rank has a gradient for ``p`` and 0 where ``p.grad is None`` (a
parameter unused by this rank's batch; its gradient is packed as zeros). After the sum, a
parameter gets a gradient on every rank exactly when at least one rank had one, so all ranks
keep updating the same parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel import compression as _compression
from minidl.distributed.data_parallel.allreduce import allreduce
from minidl.distributed.data_parallel.sparse_rows import exchange_rows
from minidl.tensor import Tensor

DEFAULT_FUSION_BYTES = 64 * 2**20  # Horovod's default HOROVOD_FUSION_THRESHOLD


@dataclass
class Bucket:
    """Parameters whose gradients share one fusion buffer (see the module doc for its layout)."""

    params: list[Tensor]
    dtype: np.dtype
    offsets: list[int] = field(default_factory=list)  # where each gradient starts in the buffer
    numel: int = 0  # gradient elements; the presence flags follow them
    buffer: np.ndarray | None = None  # reused from step to step
    rows: bool = False  # exchanged as its non-zero rows (sparse_rows.py); packed only for the dense fallback

    @property
    def length(self) -> int:
        return self.numel + len(self.params)

    @property
    def nbytes(self) -> int:
        return self.length * self.dtype.itemsize


def plan_buckets(params: Iterable[Tensor], fusion_bytes: int, rows: bool = False) -> list[Bucket]:
    """Split ``params`` (in order) into buckets of one dtype and at most ``fusion_bytes`` of gradient.

    ``fusion_bytes=0`` gives one bucket per parameter (no fusion). ``rows``: a parameter marked
    ``sparse_grad`` gets a ``rows=True`` bucket of its own.
    """
    if fusion_bytes < 0:
        raise ValueError(f"fusion_bytes must be >= 0, got {fusion_bytes}")
    buckets: list[Bucket] = []
    for p in params:
        dtype = p.data.dtype
        nbytes = p.data.size * dtype.itemsize
        by_rows = rows and getattr(p, "sparse_grad", False) and p.data.ndim >= 1
        last = buckets[-1] if buckets else None
        if (
            last is None
            or by_rows
            or last.rows
            or last.dtype != dtype
            or (last.numel * dtype.itemsize + nbytes > fusion_bytes)
        ):
            last = Bucket(params=[], dtype=dtype, rows=by_rows)
            buckets.append(last)
        last.params.append(p)
        last.offsets.append(last.numel)
        last.numel += p.data.size
    return buckets


def pack(bucket: Bucket) -> np.ndarray:
    """Copy this rank's gradients (zeros where None) and presence flags into the bucket's buffer."""
    if bucket.buffer is None or bucket.buffer.size != bucket.length:
        bucket.buffer = np.empty(bucket.length, dtype=bucket.dtype)
    buf = bucket.buffer
    for i, (p, start) in enumerate(zip(bucket.params, bucket.offsets)):
        view = buf[start : start + p.data.size]
        if p.grad is None:
            view[:] = 0
            buf[bucket.numel + i] = 0
        else:
            if p.grad.shape != p.data.shape:
                raise ValueError(f"a parameter of shape {p.data.shape} has a gradient of shape {p.grad.shape}")
            view[:] = p.grad.reshape(-1)
            buf[bucket.numel + i] = 1
    return buf


def unpack(bucket: Bucket, reduced: np.ndarray, scale: float = 1.0) -> None:
    """Write ``scale * reduced`` back into the gradients (in place where a gradient exists).

    A parameter that no rank had a gradient for keeps ``grad = None``.
    """
    if reduced.size != bucket.length:
        raise ValueError(f"unpack: buffer of {reduced.size} elements for a bucket of {bucket.length}")
    present = reduced[bucket.numel :]
    for i, (p, start) in enumerate(zip(bucket.params, bucket.offsets)):
        if present[i] == 0:
            continue
        view = reduced[start : start + p.data.size].reshape(p.data.shape)
        if p.grad is None or not p.grad.flags.writeable or p.grad.dtype != p.data.dtype:
            p.grad = np.empty_like(p.data)
        if scale == 1.0:
            np.copyto(p.grad, view)
        else:
            np.multiply(view, scale, out=p.grad)


def allreduce_buckets(
    buckets: list[Bucket],
    comm: Any,
    algorithm: str,
    scale: float,
    compression: str | None = None,
    check: bool = True,
    overflow: str = "raise",
) -> bool:
    """For each bucket: pack the gradients, compress, allreduce (sum), decompress, unpack times ``scale``;
    a ``rows`` bucket (an embedding's gradient) goes as its non-zero rows instead (sparse_rows.py).

    With compression the gradients are multiplied by ``scale`` *before* the cast (so an average of
    gradients below fp16's 65504 stays finite however many ranks add up), and a sum that is still not
    finite raises a FloatingPointError naming the bucket, or (``overflow="skip"``) prints a warning and
    returns False: every rank sees the same sum, so every rank skips. Returns True when all is finite.
    """
    finite = True
    for i, bucket in enumerate(buckets):
        dense = functools.partial(_allreduce_bucket, i, bucket, comm, algorithm, scale, compression, check, overflow)
        if bucket.rows:  # never compressed (compression plans no rows bucket): no fp16 overflow to report
            exchange_rows(bucket.params[0], comm, scale, dense)  # whole (dense()) when the rows are many
        else:
            finite &= dense()
    return finite


def _allreduce_bucket(
    i: int,
    bucket: Bucket,
    comm: Any,
    algorithm: str,
    scale: float,
    compression: str | None,
    check: bool,
    overflow: str,
) -> bool:
    """Bucket i packed, allreduced and unpacked (see allreduce_buckets); False if an fp16 sum is not finite."""
    packed = pack(bucket)
    prescale = compression is not None and scale != 1.0
    if prescale:
        packed *= packed.dtype.type(scale)
    with np.errstate(over="ignore"):  # an fp16 overflow is reported below, naming the bucket
        reduced = allreduce(comm, _compression.compress(packed, compression), algorithm, "sum", check=check)
    finite = compression is None or bool(np.isfinite(reduced).all())
    if not finite:
        _compression.report_overflow(i, bucket, comm.Get_size(), overflow)
    unpack(bucket, _compression.decompress(reduced, bucket.dtype), 1.0 if prescale else scale)
    return finite


def average_bucketed(
    params: Iterable[Tensor], comm: Any = None, fusion_bytes: int = DEFAULT_FUSION_BYTES, algorithm: str = "ring"
) -> None:
    """Step 1's ``average_gradients`` with the gradients fused: one allreduce per bucket, not per parameter.

    A parameter that no rank has a gradient for keeps ``grad = None`` (the presence flags).
    """
    comm = get_comm(comm)
    if comm.Get_size() > 1:
        allreduce_buckets(plan_buckets(params, fusion_bytes), comm, algorithm, 1.0 / comm.Get_size())
