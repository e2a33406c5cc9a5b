"""SyncBatchNorm: batch statistics over the global batch of all ranks, not each rank's own.

Plain ``BatchNorm2d`` in a data-parallel job normalizes with each rank's batch of b examples: the
statistics (and their noise) are those of b, whatever P is. Goyal et al. (2017) keep it that way on
purpose (b = 32 per worker, so BN behaves as in small-batch training). With very small per-rank
batches the statistics get too noisy; with a very large batch normalized as a whole they get too
smooth - the large-batch trouble the Dell team met scaling ResNet-50 on CPUs (seed 004). SyncBatchNorm
makes the choice explicit: the statistics are those of the global batch P*b, so P ranks compute
exactly what one process with batch P*b computes.

The statistics are sums, so synchronizing them costs one tiny allreduce per layer and direction
(``minidl.nn.norm`` exposes the ``reduce`` hook both use):

    forward:  [sum x, sum x^2, count]  per channel, summed over ranks -> global mean and variance
    backward: [sum dy, sum dy * xhat]  per channel, summed over ranks -> dx as for the global batch

dgamma and dbeta stay per rank; the DistributedOptimizer averages them with the other gradients.
Every rank must run forward and backward of every SyncBatchNorm layer in the same order (they
do, running the same model), since each is a collective call.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.allreduce import allreduce, check_algorithm
from minidl.distributed.context import get_comm
from minidl.nn.module import Module
from minidl.nn.norm import _BatchNorm
from minidl.tensor import Tensor


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over [N, C] ... [N, C, D, H, W] inputs whose training statistics span all ranks.

    Args: as ``BatchNorm2d`` (num_features, eps, momentum, affine, track_running_stats), plus
    ``algorithm`` (the allreduce of the per-channel sums; "ring" by default, any of
    ``dist.ALGORITHMS``) and ``comm`` (default: the communicator of ``dist.init()``, looked up at
    each forward). In eval mode it is plain BatchNorm with the running statistics (no communication).
    """

    expected_dims = (2, 3, 4, 5)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float | None = 0.1, affine: bool = True,
                 track_running_stats: bool = True, dtype=None, algorithm: str = "ring", comm: Any = None):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype)
        self.algorithm = check_algorithm(algorithm)
        self.comm = comm

    def forward(self, x: Tensor) -> Tensor:
        comm = get_comm(self.comm)
        if comm.Get_size() == 1:
            return super().forward(x)

        def reduce(sums: np.ndarray) -> np.ndarray:
            return allreduce(comm, np.ascontiguousarray(sums), self.algorithm, "sum")

        return super().forward(x, reduce=reduce)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, algorithm={self.algorithm!r}"


def convert_sync_batchnorm(module: Module, algorithm: str = "ring", comm: Any = None) -> Module:
    """Replace every BatchNorm1d/2d in ``module`` by a SyncBatchNorm with the same parameters and buffers.

    Returns the converted module (a new object only if ``module`` itself is a BatchNorm), like
    ``torch.nn.SyncBatchNorm.convert_sync_batchnorm``.
    """
    if isinstance(module, _BatchNorm) and not isinstance(module, SyncBatchNorm):
        return _to_sync(module, algorithm, comm)
    for _, parent in list(module.named_modules()):
        for name, child in list(parent._modules.items()):
            if isinstance(child, _BatchNorm) and not isinstance(child, SyncBatchNorm):
                sync = _to_sync(child, algorithm, comm)
                parent._modules[name] = sync  # in place: the order of children (Sequential's) must not change
                object.__setattr__(parent, name, sync)
    return module


def _to_sync(bn: _BatchNorm, algorithm: str, comm: Any) -> SyncBatchNorm:
    dtype = bn.weight.dtype if bn.weight is not None else (bn.running_mean.dtype if bn.track_running_stats else None)
    sync = SyncBatchNorm(bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats, dtype,
                         algorithm, comm)
    if bn.affine:
        sync.weight, sync.bias = bn.weight, bn.bias  # the same Parameter objects: optimizers keep working
    if bn.track_running_stats:
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            sync.register_buffer(name, getattr(bn, name))
    sync.train(bn.training)
    return sync
