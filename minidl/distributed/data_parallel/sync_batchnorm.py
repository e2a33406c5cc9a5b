"""SyncBatchNorm: batch statistics over the global batch of all ranks, not each rank's own.

Plain ``BatchNorm2d`` in a data-parallel job normalizes with each rank's batch of b examples: the
statistics (and their noise) are those of b, whatever P is. Goyal et al. (2017) keep it that way on
purpose (b = 32 per worker, so BN behaves as in small-batch training). With very small per-rank
batches the statistics get too noisy; with a very large batch normalized as a whole they get too
smooth - the large-batch trouble the Dell team met scaling ResNet-50 on CPUs (Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure", 2018). SyncBatchNorm
makes the choice explicit: the statistics are those of the global batch P*b, so P ranks compute
exactly what one process with batch P*b computes.

The statistics are sums, so synchronizing them costs one tiny allreduce per layer and direction
(``minidl.nn.norm`` exposes the ``reduce`` hook both use):

    forward:  [sum x, sum x^2, count]  per channel, summed over ranks -> global mean and variance
    backward: [sum dy, sum dy * xhat]  per channel, summed over ranks -> dx as for the global batch

dgamma and dbeta stay per rank; the DistributedOptimizer averages them with the other gradients.
Every rank must run forward and backward of every SyncBatchNorm layer in the same order (they
do, running the same model), since each is a collective call.

Ranks with unusual inputs:

* an empty local batch (N = 0) is allowed: it contributes zero sums and a zero count, as in
  PyTorch's SyncBatchNorm, and gets an empty output; only an empty global batch is an error;
* a rank whose input cannot be normalized with the others' (wrong channels or dimensions, or a
  dtype other than the other ranks') must not raise on its own: the others would wait in the
  allreduce forever. So the forward's allreduce carries three more numbers, summed over ranks:
  [number of bad inputs, sum of dtype codes c, sum of c^2] (the codes agree iff their variance is
  0: P * sum(c^2) == (sum c)^2). Good inputs cost no extra message; otherwise every rank gathers
  each rank's input description and raises the same ``MismatchError`` naming the ranks and problems.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import allreduce, check_algorithm
from minidl.nn.module import Module
from minidl.nn.norm import _BatchNorm
from minidl.tensor import Tensor

_SHAPE_DIMS = 6  # input dims each rank reports when some input is bad (SyncBatchNorm takes up to 5)


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over [N, C] ... [N, C, D, H, W] inputs whose training statistics span all ranks.

    Args: as ``BatchNorm2d`` (num_features, eps, momentum, affine, track_running_stats), plus
    ``algorithm`` (the allreduce of the per-channel sums; "ring" by default, any of
    ``dist.ALGORITHMS``) and ``comm`` (default: the communicator of ``dist.init()``, looked up at
    each forward). In eval mode it is plain BatchNorm with the running statistics (no communication).
    """

    expected_dims = (2, 3, 4, 5)

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype=None,
        algorithm: str = "ring",
        comm: Any = None,
    ):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, dtype)
        self.algorithm = check_algorithm(algorithm)
        self.comm = comm

    def forward(self, x: Tensor) -> Tensor:
        comm = get_comm(self.comm)
        batch_statistics = self.training or not self.track_running_stats
        if comm.Get_size() == 1 or not batch_statistics:
            return super().forward(x)  # no communication: a bad input may raise on its own rank
        problem = self.input_problem(tuple(x.shape))
        statistics_checked = False

        def reduce(sums: np.ndarray) -> np.ndarray:
            nonlocal statistics_checked
            if statistics_checked:  # the backward's [sum dy, sum dy * xhat]
                return allreduce(comm, np.ascontiguousarray(sums), self.algorithm, "sum")
            statistics_checked = True  # the forward's [sum x, sum x^2, M], with every rank's input checked
            return self._allreduce_checking_inputs(comm, sums, x, problem)

        if problem is not None:  # join the other ranks' statistics allreduce (with zeros); it raises everywhere
            reduce(np.zeros((3, self.num_features)))
        return super().forward(x, reduce=reduce)

    def _allreduce_checking_inputs(self, comm: Any, sums: np.ndarray, x: Tensor, problem: str | None) -> np.ndarray:
        """The allreduce of the forward's sums [3, C], which also tells every rank whether any rank's input
        is bad or the dtypes differ (see the module docstring); if so, every rank raises the same error."""
        code = float(ord(x.dtype.char))
        status = np.array([problem is not None, code, code * code])
        total = allreduce(comm, np.concatenate([sums.reshape(-1), status]), self.algorithm, "sum")
        sums, (bad, sum_c, sum_c2) = total[:-3].reshape(sums.shape), total[-3:]
        if bad > 0 or comm.Get_size() * sum_c2 != sum_c * sum_c:
            self._raise_input_mismatch(comm, x)
        return sums

    def _raise_input_mismatch(self, comm: Any, x: Tensor) -> None:
        """Gather every rank's input (ndim, dtype code, shape's first dims) and raise naming the bad ones."""
        import collectives

        row = np.zeros(2 + _SHAPE_DIMS, dtype=np.int64)
        row[0], row[1] = x.ndim, ord(x.dtype.char)
        row[2 : 2 + min(x.ndim, _SHAPE_DIMS)] = x.shape[:_SHAPE_DIMS]
        table = collectives.allgather(comm, row)
        lines = []
        for r, (ndim, _, *dims) in enumerate(table.tolist()):
            shape = tuple(dims[:ndim]) if ndim <= _SHAPE_DIMS else None
            problem = (
                self.input_problem(shape)
                if shape is not None
                else f"expected at most {max(self.expected_dims)} dimensions, got a {ndim}-D input"
            )
            if problem is not None:
                lines.append(f"rank {r}: {problem}")
        dtypes: dict[str, list[int]] = {}
        for r, code in enumerate(table[:, 1].tolist()):
            dtypes.setdefault(np.dtype(chr(code)).name, []).append(r)
        if len(dtypes) > 1:
            lines.append(
                "inputs of different dtypes: "
                + ", ".join(
                    f"ranks {ranks} {name}" if len(ranks) > 1 else f"rank {ranks[0]} {name}"
                    for name, ranks in dtypes.items()
                )
            )
        raise collectives.MismatchError(
            f"{type(self).__name__}({self.num_features}): ranks cannot normalize their "
            "inputs together (every rank raises this error):\n  " + "\n  ".join(lines)
        )

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
    sync = SyncBatchNorm(
        bn.num_features, bn.eps, bn.momentum, bn.affine, bn.track_running_stats, dtype, algorithm, comm
    )
    if bn.affine:
        sync.weight, sync.bias = bn.weight, bn.bias  # the same Parameter objects: optimizers keep working
    if bn.track_running_stats:
        for name in ("running_mean", "running_var", "num_batches_tracked"):
            sync.register_buffer(name, getattr(bn, name))
    sync.train(bn.training)
    return sync
