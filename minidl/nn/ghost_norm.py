"""Ghost batch norm (Hoffer, Hubara & Soudry, "Train longer, generalize better: closing the generalization gap in
large batch training of neural networks", 2017): batch statistics over small "virtual" batches of a large one.

A large batch's mean and variance are nearly noiseless, and that noise is part of what makes small-batch
training generalize. Ghost batch norm keeps it: the N examples are cut into ceil(N / v) consecutive virtual
batches of v (the last may be shorter), and each is normalized by its own statistics, exactly as
``BatchNorm2d`` would normalize it alone:

    y[k] = weight * (x[k] - mean(x[k])) / sqrt(var(x[k]) + eps) + bias,   x[k] = x[k v : (k + 1) v]

The running statistics are updated once per virtual batch, in order (as BatchNorm2d applied to each in turn
would); evaluation uses them, as BatchNorm2d does.
"""

from __future__ import annotations

from typing import Any

import minidl
from minidl.nn.norm import BatchNorm2d
from minidl.tensor import Tensor


class GhostBatchNorm2d(BatchNorm2d):
    """GhostBatchNorm2d(num_features, virtual_batch_size): input [N, C, H, W]; statistics per channel and per
    virtual batch of ``virtual_batch_size`` consecutive examples while training."""

    def __init__(self, num_features: int, virtual_batch_size: int, **kwargs: Any):
        if int(virtual_batch_size) != virtual_batch_size or virtual_batch_size < 1:
            raise ValueError(f"GhostBatchNorm2d: virtual_batch_size must be an integer >= 1, got {virtual_batch_size}")
        super().__init__(num_features, **kwargs)
        self.virtual_batch_size = int(virtual_batch_size)

    def forward(self, x: Tensor, gather: Any = None, reduce: Any = None) -> Tensor:
        if gather is not None or reduce is not None:
            raise ValueError("GhostBatchNorm2d: statistics are per virtual batch; they are never shared across ranks")
        v = self.virtual_batch_size
        if not self.training or x.shape[0] <= v:
            return super().forward(x)
        self.check_input(x)
        starts = list(range(v, x.shape[0], v))
        return minidl.cat([super(GhostBatchNorm2d, self).forward(part) for part in x.split(starts)], axis=0)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, virtual_batch_size={self.virtual_batch_size}"
