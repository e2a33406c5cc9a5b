"""Step 1 of data parallelism: average every gradient over the ranks, one allreduce per parameter.

Rank r computed g_r, the gradient of the loss on its own share of the batch. With equal shares the
gradient of the whole batch is their mean, (1/p) sum_r g_r: an allreduce (sum) and a division. After
it every rank holds the same gradient and takes the same update from the same parameters, so the
replicas stay identical. That is all of synchronous data parallelism; the next steps only make it fast:
fusion.py (step 2) packs the gradients into a few large buffers, overlap.py (step 3) sends each buffer
while backward still runs.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import allreduce
from minidl.tensor import Tensor


def average_gradients(params: Iterable[Tensor], comm: Any = None, algorithm: str = "ring") -> None:
    """Replace each ``p.grad`` by its mean over the ranks of ``comm``, in place on every rank.

    Every rank must pass the same parameters in the same order. A parameter this rank has no gradient
    for counts as zeros (so afterwards every rank has one).
    """
    comm = get_comm(comm)
    for p in params:
        g = p.grad if p.grad is not None else np.zeros_like(p.data)
        p.grad = allreduce(comm, g, algorithm, "sum") / comm.Get_size()
