"""SyncBatchNorm: batch statistics over the global batch of all ranks, not each rank's own.

Plain ``BatchNorm2d`` in a data-parallel job normalizes with each rank's batch of b examples: the
statistics (and their noise) are those of b, whatever P is. Goyal et al. (2017) keep it that way on
purpose (b = 32 per worker, so BN behaves as in small-batch training). With very small per-rank
batches the statistics get too noisy; with a very large batch normalized as a whole they get too
smooth - the large-batch trouble the Dell team met scaling ResNet-50 on CPUs (Hemsoth, "Scaling with
Accuracy on CPU-Only HPC Infrastructure", The Next Platform, 2018). SyncBatchNorm
makes the choice explicit: the statistics are those of the global batch P*b, so P ranks compute
exactly what one process with batch P*b computes.

Synchronizing costs one small collective per layer and direction (``minidl.nn.norm`` exposes the
``gather`` and ``reduce`` hooks):

    forward:  [count, mean, M2] per channel, gathered from every rank (an allgather of 3C numbers,
              as PyTorch's SyncBatchNorm does) and merged by Chan et al.'s parallel formula (Chan, Golub
              & LeVeque, "Updating formulae and a pairwise algorithm for computing sample variances",
              1979) -> the global mean and variance, as accurate as one process's. Summing [sum x,
              sum x^2] instead would be one allreduce, but E[x^2] - E[x]^2 loses every digit when the
              mean is large against the spread.
    backward: [sum dy, sum dy * xhat] per channel, summed over ranks (an allreduce) -> dx as for the
              global batch

dgamma and dbeta stay per rank; the DistributedOptimizer averages them with the other gradients.
Every rank must run forward and backward of every SyncBatchNorm layer in the same order (they
do, running the same model), since each is a collective call.

Ranks with unusual inputs:

* an empty local batch (N = 0) is allowed: it contributes zero sums and a zero count, as in
  PyTorch's SyncBatchNorm, and gets an empty output; only an empty global batch is an error;
* a rank whose input cannot be normalized with the others' (wrong channels or dimensions, or a
  dtype other than the other ranks') must not raise on its own: the others would wait in the
  allgather forever. So each rank's row of the forward's allgather also describes its input
  [bad?, dtype code, ndim, first 6 dims]: every rank sees every rank's input, checks them all the
  same way and raises the same ``MismatchError`` naming the ranks and problems. No extra message.
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

        def gather(moments: np.ndarray) -> np.ndarray:  # the forward's [count, mean, M2] of every rank
            return self._gather_checking_inputs(comm, moments, x, problem)

        def reduce(sums: np.ndarray) -> np.ndarray:  # the backward's [sum dy, sum dy * xhat], summed
            return allreduce(comm, np.ascontiguousarray(sums), self.algorithm, "sum")

        if problem is not None:  # join the other ranks' allgather (with zeros); it raises everywhere
            gather(np.zeros((3, self.num_features)))
        return super().forward(x, gather=gather, reduce=reduce)

    def _gather_checking_inputs(self, comm: Any, moments: np.ndarray, x: Tensor, problem: str | None) -> np.ndarray:
        """Every rank's moments [P, 3, C], gathered with a description of every rank's input; if any is
        bad or the dtypes differ, every rank raises the same error (see the module docstring)."""
        row = np.zeros(moments.size + 3 + _SHAPE_DIMS)
        row[: moments.size] = moments.reshape(-1)
        row[moments.size : moments.size + 3] = [problem is not None, ord(x.dtype.char), x.ndim]
        row[moments.size + 3 : moments.size + 3 + min(x.ndim, _SHAPE_DIMS)] = x.shape[:_SHAPE_DIMS]
        table = _allgather(comm, row, self.algorithm)
        inputs = table[:, moments.size :].astype(np.int64)
        if inputs[:, 0].any() or len(set(inputs[:, 1].tolist())) > 1:
            self._raise_input_mismatch(inputs)
        return table[:, : moments.size].reshape((-1,) + moments.shape)

    def _raise_input_mismatch(self, inputs: np.ndarray) -> None:
        """Raise naming every bad rank's input and the dtypes; ``inputs`` is [P, (bad, dtype code, ndim, dims)]."""
        import collectives

        lines = []
        for r, (_, _, ndim, *dims) in enumerate(inputs.tolist()):
            shape = tuple(dims[:ndim]) if ndim <= _SHAPE_DIMS else None
            problem = (
                self.input_problem(shape)
                if shape is not None
                else f"expected at most {max(self.expected_dims)} dimensions, got a {ndim}-D input"
            )
            if problem is not None:
                lines.append(f"rank {r}: {problem}")
        dtypes: dict[str, list[int]] = {}
        for r, code in enumerate(inputs[:, 1].tolist()):
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


def _allgather(comm: Any, row: np.ndarray, algorithm: str) -> np.ndarray:
    """Every rank's row [P, n]: MPI's own Allgather for algorithm "mpi", else the collectives' ring (or
    recursive doubling, for the allreduce algorithms built on it)."""
    if algorithm == "mpi":
        table = np.empty((comm.Get_size(), row.size), row.dtype)
        comm.Allgather(row, table)
        return table
    import collectives

    doubling = algorithm in ("recursive_doubling", "rabenseifner")
    return collectives.allgather(comm, row, "recursive_doubling" if doubling else "ring")


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
