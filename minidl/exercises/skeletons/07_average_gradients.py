"""Exercise 7: data-parallel gradient averaging (tutorial 05, section 1).

P ranks hold the same model. Rank r draws count_r samples of the global batch (np.array_split of it, so the
counts may differ by one, and a rank may have none), computes the mean loss over them and runs backward:
its p.grad is g_r = (1 / count_r) sum_{i in shard r} grad l_i. The gradient of the mean loss over the whole
batch of N = sum_r count_r samples, the one a single process would compute, is

    g = (1 / N) sum_i grad l_i = sum_r (count_r / N) g_r

Weight each rank's gradient by count_r, sum the weighted gradients and the counts over the ranks with an
allreduce, and divide: then every rank holds exactly one process's gradient (for equal shards this is the
plain mean (1 / P) sum_r g_r, Horovod's average; for unequal ones the plain mean is wrong).

``collectives.allreduce(comm, array, op="sum")`` returns the sum over ranks as a new array, with the same
bits on every rank, so the replicas stay identical step after step. A rank with count_r = 0 ran no
backward: its p.grad is None, which counts as zeros (and the rank still takes part in every allreduce).

The checker trains minidl's nn.Linear with a mean squared error on P in-process ranks
(collectives.simulate) and compares with one process on the whole batch: on data whose every sum is exact
in float64 (small integers, power-of-two counts) the result must have the same bits; otherwise within 1e-12.

Check it:  python -m minidl.exercises check average_gradients
"""

from __future__ import annotations

from typing import Any

import collectives  # noqa: F401  (you will need collectives.allreduce)
from minidl.nn import Parameter


def average_gradients(comm: Any, params: list[Parameter], count: int) -> None:
    """Set every ``p.grad`` (an ndarray of p's shape; None counts as zeros) to the gradient of the mean loss over
    every rank's samples; ``count`` is this rank's number of samples (>= 0). The same on every rank."""
    raise NotImplementedError("exercise: average_gradients")
