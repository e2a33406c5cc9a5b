"""Shards and the conjugate region operators of tensor parallelism (Megatron's f and g, and their gather/scatter
kin): which features a rank holds, and the autograd Functions that move activations between the ranks of a
tensor-parallel group. ``tensor_parallel.py`` builds its layers on them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import allreduce, check_algorithm
from minidl.tensor import Function, Tensor

# ----------------------------------------------------------------------------- shards


def shard_range(n: int, rank: int, size: int) -> slice:
    """Rank ``rank``'s part of ``n`` features split over ``size`` ranks (``np.array_split``'s blocks)."""
    if size < 1 or not 0 <= rank < size:
        raise ValueError(f"shard_range: rank {rank} out of range for {size} ranks")
    if n < size:
        raise ValueError(f"shard_range: cannot split {n} features over {size} ranks (each needs at least one)")
    base, extra = divmod(n, size)
    start = rank * base + min(rank, extra)
    return slice(start, start + base + (rank < extra))


def shard_linear(
    weight: np.ndarray, bias: np.ndarray | None, style: str, rank: int, size: int
) -> tuple[np.ndarray, np.ndarray | None]:
    """Rank ``rank``'s slice of a dense Linear's (weight [out, in], bias [out]), as copies.

    ``style="column"``: rows of W and of b (output features). ``style="row"``: columns of W (input
    features); the bias is whole on every rank (it is added once, after the allreduce).
    """
    weight = np.asarray(weight)
    if weight.ndim != 2:
        raise ValueError(f"shard_linear: weight must be 2-D [out, in], got shape {weight.shape}")
    if style == "column":
        part = shard_range(weight.shape[0], rank, size)
        return weight[part].copy(), None if bias is None else np.array(bias[part], copy=True)
    if style == "row":
        part = shard_range(weight.shape[1], rank, size)
        return weight[:, part].copy(), None if bias is None else np.array(bias, copy=True)
    raise ValueError(f"shard_linear: style must be 'column' or 'row', got {style!r}")


def allgather_last_axis(comm: Any, x: np.ndarray, sizes: list[int]) -> np.ndarray:
    """Concatenate every rank's ``x`` along the last axis (rank r's has ``sizes[r]`` columns).

    Blocks are padded to the largest size for the allgather (which moves equal blocks) and trimmed after.
    """
    import collectives

    width = max(sizes)
    padded = np.zeros(x.shape[:-1] + (width,), x.dtype)
    padded[..., : x.shape[-1]] = x
    blocks = collectives.allgather(comm, padded)  # [P, ..., width]
    return np.concatenate([blocks[r][..., :n] for r, n in enumerate(sizes)], axis=-1)


def shard_sizes(n: int, size: int) -> list[int]:
    return [shard_range(n, r, size).stop - shard_range(n, r, size).start for r in range(size)]


# ----------------------------------------------------------------------------- f, g and friends
class CopyToParallelRegion(Function):
    """f: forward the identity (X goes to every rank's slice), backward an allreduce of dL/dX."""

    def forward(self, x, *, comm: Any, algorithm: str, check: bool):
        self.comm, self.algorithm, self.check = comm, algorithm, check
        return x.view()

    def backward(self, g):
        return allreduce(self.comm, np.ascontiguousarray(g), self.algorithm, "sum", self.check)


class ReduceFromParallelRegion(Function):
    """g: forward an allreduce (sum of the ranks' partial results), backward the identity."""

    def forward(self, x, *, comm: Any, algorithm: str, check: bool):
        return allreduce(comm, np.ascontiguousarray(x), algorithm, "sum", check)

    def backward(self, g):
        return g


class GatherFromParallelRegion(Function):
    """Forward: allgather the ranks' column blocks along the last axis. Backward: this rank's block of dL/dY
    (dL/dY is the same on every rank, the computation after the gather being replicated)."""

    def forward(self, x, *, comm: Any, sizes: list[int]):
        rank = comm.Get_rank()
        self.part = slice(sum(sizes[:rank]), sum(sizes[: rank + 1]))
        return allgather_last_axis(comm, x, sizes)

    def backward(self, g):
        return np.ascontiguousarray(g[..., self.part])


class ScatterToParallelRegion(Function):
    """Forward: this rank's block of the last axis (no communication). Backward: allgather the blocks of dL/dX."""

    def forward(self, x, *, comm: Any, sizes: list[int]):
        rank = comm.Get_rank()
        self.comm, self.sizes = comm, sizes
        return x[..., sum(sizes[:rank]) : sum(sizes[: rank + 1])]

    def backward(self, g):
        return allgather_last_axis(self.comm, np.ascontiguousarray(g), self.sizes)


def copy_to_parallel_region(x: Tensor, comm: Any = None, algorithm: str = "ring", check: bool = True) -> Tensor:
    """Megatron's f: identity forward, allreduce (sum) of the gradient backward."""
    return CopyToParallelRegion.apply(x, comm=get_comm(comm), algorithm=check_algorithm(algorithm), check=check)


def reduce_from_parallel_region(x: Tensor, comm: Any = None, algorithm: str = "ring", check: bool = True) -> Tensor:
    """Megatron's g: allreduce (sum) forward, identity backward."""
    return ReduceFromParallelRegion.apply(x, comm=get_comm(comm), algorithm=check_algorithm(algorithm), check=check)


def gather_from_parallel_region(x: Tensor, n: int, comm: Any = None) -> Tensor:
    """The whole last axis (``n`` features, split as ``shard_range``) from every rank's block."""
    comm = get_comm(comm)
    return GatherFromParallelRegion.apply(x, comm=comm, sizes=shard_sizes(n, comm.Get_size()))


def scatter_to_parallel_region(x: Tensor, comm: Any = None) -> Tensor:
    """This rank's block of x's last axis (split as ``shard_range``); the gradient is allgathered."""
    comm = get_comm(comm)
    return ScatterToParallelRegion.apply(x, comm=comm, sizes=shard_sizes(x.shape[-1], comm.Get_size()))
