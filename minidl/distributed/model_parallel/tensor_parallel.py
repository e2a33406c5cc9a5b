"""Tensor (intra-layer) parallelism, Megatron-style: one Linear's weight matrix split over ranks.

Shoeybi et al. (2019), "Megatron-LM" (arXiv:1909.08053), section 3. Every rank sees the same input
X and holds a slice of each weight matrix; Y = X W^T + b is assembled from the slices.

Column-parallel (W's rows, i.e. the output features, split; rank r holds W_r [out_r, in], b_r):

    Y_r = X W_r^T + b_r        the r-th block of Y's columns, no communication;
                               ``gather_output`` allgathers the blocks into the whole Y.

Row-parallel (W's columns, i.e. the input features, split; rank r holds W_r [out, in_r]):

    Y = sum_r X_r W_r^T + b    each rank's partial product, summed by an allreduce; b is whole, added once.

Chained (column then row, the MLP block), X_r = act(Y_r) stays on its rank and the pair costs one
allreduce forward (after the row layer) and one backward (of dL/dX before the column layer). Megatron
writes these two as conjugate operators:

    f  (copy_to_parallel_region):     forward identity,   backward allreduce  (X enters every rank)
    g  (reduce_from_parallel_region): forward allreduce,  backward identity   (partial sums leave)

Why f's backward is an allreduce: every rank's W_r contributes to dL/dX = sum_r dL/dY_r W_r. Why g's
backward is the identity: everything after g is the same computation on every rank, so dL/dY is
already the same everywhere. Parameters after g (the row layer's bias, layers that follow) are
replicated and get the same gradient on every rank: no gradient allreduce is needed, and the
replicas stay bitwise equal (the collectives give every rank the same bits).

For a language model, the vocabulary-sized decoder is column-parallel without gathering its logits:
``vocab_parallel_cross_entropy`` computes softmax cross entropy over logits split by vocabulary
(Megatron's parallel cross entropy: three numbers per row travel, never the [N, V] logits).

Shards follow ``np.array_split``: the first ``n % P`` ranks hold one feature more. Weight init:
each layer draws the whole dense Linear from the current RNG (PyTorch's init, fan-in of the whole
layer) and keeps its slice, so with the same seed on every rank the sharded layer *is* the dense layer
``Linear(in, out)`` would have been; ``from_dense`` shards a given one; ``gather_linear`` puts the
whole weight back together (on every rank).

Every collective call here first checks that the ranks agree on shapes (``check=True``, a 128-byte
header exchange per call): turn it off per layer only when the inputs are known to match.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import allreduce, check_algorithm
from minidl.distributed.model_parallel.regions import (
    allgather_last_axis,
    copy_to_parallel_region,
    gather_from_parallel_region,
    reduce_from_parallel_region,
    scatter_to_parallel_region,
    shard_linear,
    shard_range,
    shard_sizes,
)
from minidl.nn.init import default_weight_and_bias_
from minidl.nn.linear import Linear, linear
from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype


# ----------------------------------------------------------------------------- layers
def _dense_init(in_features: int, out_features: int, bias: bool, dtype: Any) -> tuple[np.ndarray, np.ndarray | None]:
    """The whole dense Linear's weights, drawn exactly as ``Linear(in, out)`` draws them."""
    weight = Tensor(np.empty((out_features, in_features), dtype))
    b = Tensor(np.empty(out_features, dtype)) if bias else None
    default_weight_and_bias_(weight, b)
    return weight.data, None if b is None else b.data


class _ParallelLinear(Module):
    """What the two layers share: sizes, communicator, sharding of a dense layer, and gathering it back."""

    style = ""

    def __init__(
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        comm: Any = None,
        algorithm: str = "ring",
        check: bool = True,
        dtype: Any = None,
        dense: Linear | tuple[np.ndarray, np.ndarray | None] | None = None,
    ):
        """The options both layers share (a subclass adds its one flag after ``bias``)."""
        super().__init__()
        if in_features < 1 or out_features < 1:
            raise ValueError(f"{type(self).__name__}: features must be >= 1, got in={in_features}, out={out_features}")
        self.in_features, self.out_features = in_features, out_features
        self.comm = get_comm(comm)
        self.algorithm, self.check = check_algorithm(algorithm), check
        self.rank, self.world = self.comm.Get_rank(), self.comm.Get_size()
        if dense is None:
            dense = _dense_init(in_features, out_features, bias, dtype or get_default_dtype())
        elif isinstance(dense, Linear):
            dense = (dense.weight.data, None if dense.bias is None else dense.bias.data)
        weight, b = dense
        if weight.shape != (out_features, in_features) or (b is None) == bias:
            raise ValueError(
                f"{type(self).__name__}: the dense layer has weight {weight.shape} and "
                f"{'a' if b is not None else 'no'} bias; expected [{out_features}, {in_features}] "
                f"and {'a' if bias else 'no'} bias"
            )
        w_shard, b_shard = shard_linear(weight, b, self.style, self.rank, self.world)
        self.weight = Parameter(w_shard)
        self.bias = Parameter(b_shard) if b_shard is not None else None

    @classmethod
    def from_dense(cls, dense: Linear, **kwargs: Any):
        """This rank's shard of ``dense`` (its weights copied; the dense layer is left as it is)."""
        return cls(dense.in_features, dense.out_features, dense.bias is not None, dense=dense, **kwargs)

    def extra_repr(self) -> str:
        shard = tuple(self.weight.shape)
        return (
            f"in_features={self.in_features}, out_features={self.out_features}, bias={self.bias is not None}, "
            f"rank {self.rank} of {self.world}, shard {shard}"
        )


class ColumnParallelLinear(_ParallelLinear):
    """Y = X W^T + b with the output features split: rank r holds W[rows_r] [out_r, in] and b[rows_r].

    ``forward(x [..., in]) -> [..., out]`` (``gather_output=True``, an allgather) or ``[..., out_r]``, this
    rank's columns of Y (``gather_output=False``, no communication, as before a RowParallelLinear).
    The backward allreduces dL/dX (Megatron's f). ``dense``: a ``Linear`` (or (weight, bias)) to shard;
    default: a fresh PyTorch-style init of the whole layer from the current RNG (same seed, same layer).
    """

    style = "column"

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, gather_output: bool = True, *args, **kwargs
    ):  # then comm, algorithm, check, dtype, dense: _ParallelLinear's
        super().__init__(in_features, out_features, bias, *args, **kwargs)
        self.gather_output, self.out_range = gather_output, shard_range(out_features, self.rank, self.world)

    def forward(self, x: Tensor) -> Tensor:
        x = copy_to_parallel_region(x, self.comm, self.algorithm, self.check)
        y = linear(x, self.weight, self.bias)
        return gather_from_parallel_region(y, self.out_features, self.comm) if self.gather_output else y


class RowParallelLinear(_ParallelLinear):
    """Y = sum_r X_r W_r^T + b with the input features split: rank r holds W[:, cols_r] [out, in_r]; b whole.

    ``forward(x)``: x is this rank's block [..., in_r] (``input_is_parallel=True``, what a
    ColumnParallelLinear with ``gather_output=False`` produces) or the whole [..., in], of which the
    layer takes its block. The partial products are allreduced (Megatron's g); the output [..., out] is
    the same on every rank.
    """

    style = "row"

    def __init__(
        self, in_features: int, out_features: int, bias: bool = True, input_is_parallel: bool = True, *args, **kwargs
    ):  # then comm, algorithm, check, dtype, dense: _ParallelLinear's
        super().__init__(in_features, out_features, bias, *args, **kwargs)
        self.input_is_parallel, self.in_range = input_is_parallel, shard_range(in_features, self.rank, self.world)

    def forward(self, x: Tensor) -> Tensor:
        if not self.input_is_parallel:
            x = scatter_to_parallel_region(x, self.comm)
        width = self.in_range.stop - self.in_range.start
        if x.shape[-1] != width:
            raise ValueError(
                f"RowParallelLinear: rank {self.rank} holds input features {self.in_range.start}:"
                f"{self.in_range.stop}, so its input's last dimension must be {width}; got shape "
                f"{x.shape}"
            )
        partial = linear(x, self.weight)
        y = reduce_from_parallel_region(partial, self.comm, self.algorithm, self.check)
        return y if self.bias is None else y + self.bias


def gather_linear(
    layer: ColumnParallelLinear | RowParallelLinear, grad: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """The whole dense (weight [out, in], bias [out]) of a sharded layer, on every rank (an allgather).

    ``grad=True``: the same for the gradients (``.grad``; zeros where there is none yet).
    """
    if not isinstance(layer, (ColumnParallelLinear, RowParallelLinear)):
        raise TypeError(
            f"gather_linear: expected a ColumnParallelLinear or RowParallelLinear, got {type(layer).__name__}"
        )

    def values(p: Parameter | None) -> np.ndarray | None:
        if p is None:
            return None
        if not grad:
            return p.data
        return p.grad if p.grad is not None else np.zeros_like(p.data)

    w, b = values(layer.weight), values(layer.bias)
    if isinstance(layer, ColumnParallelLinear):
        sizes = shard_sizes(layer.out_features, layer.world)
        weight = allgather_last_axis(layer.comm, np.ascontiguousarray(w.T), sizes).T.copy()
        return weight, None if b is None else allgather_last_axis(layer.comm, b, sizes)
    sizes = shard_sizes(layer.in_features, layer.world)
    return allgather_last_axis(layer.comm, w, sizes), None if b is None else b.copy()


class ParallelMLP(Module):
    """Linear(in, hidden) -> activation -> Linear(hidden, out) with the hidden features split over ranks.

    ``fc1`` is column-parallel (no gather), the activation acts on each rank's hidden block, ``fc2`` is
    row-parallel: one allreduce forward ([..., out]) and one backward ([..., in]) per block, the
    output the same on every rank. ``activation``: a Module applied elementwise (default ReLU); it
    must be elementwise, or the split would change the function. ``dense``: (fc1, fc2), each a
    ``Linear`` or a (weight, bias) pair, to shard; default a fresh init of both.
    """

    def __init__(
        self,
        in_features: int,
        hidden_features: int,
        out_features: int,
        bias: bool = True,
        activation: Module | None = None,
        comm: Any = None,
        algorithm: str = "ring",
        check: bool = True,
        dtype: Any = None,
        dense: tuple[Any, Any] | None = None,
    ):
        super().__init__()
        from minidl.nn.activation import ReLU

        fc1_dense, fc2_dense = (None, None) if dense is None else dense
        self.fc1 = ColumnParallelLinear(
            in_features,
            hidden_features,
            bias,
            gather_output=False,
            comm=comm,
            algorithm=algorithm,
            check=check,
            dtype=dtype,
            dense=fc1_dense,
        )
        self.activation = ReLU() if activation is None else activation
        self.fc2 = RowParallelLinear(
            hidden_features,
            out_features,
            bias,
            input_is_parallel=True,
            comm=comm,
            algorithm=algorithm,
            check=check,
            dtype=dtype,
            dense=fc2_dense,
        )

    @classmethod
    def from_dense(cls, fc1: Linear, activation: Module, fc2: Linear, **kwargs: Any) -> ParallelMLP:
        """This rank's shard of the dense block fc1 -> activation -> fc2."""
        if fc1.out_features != fc2.in_features:
            raise ValueError(
                f"ParallelMLP.from_dense: fc1 has {fc1.out_features} outputs, fc2 {fc2.in_features} inputs"
            )
        return cls(
            fc1.in_features,
            fc1.out_features,
            fc2.out_features,
            fc1.bias is not None,
            activation=activation,
            dense=(fc1, fc2),
            **kwargs,
        )

    def forward(self, x: Tensor) -> Tensor:
        return self.fc2(self.activation(self.fc1(x)))


# ----------------------------------------------------------------------------- vocabulary-parallel loss
class VocabParallelCrossEntropy(Function):
    """Mean softmax cross entropy of logits split by class: rank r holds z[:, cols_r] (classes lo..hi-1).

    m_n   = max_c z[n, c]                      allreduce(max) of the per-rank maxima
    s_n   = sum_c exp(z[n, c] - m_n)           allreduce(sum), together with
    z_n,t = z[n, target_n]                     (only the rank that holds the target has it; others add 0)
    loss  = mean_n (log s_n + m_n - z_n,t)
    dL/dz[n, c] = (softmax(z)[n, c] - [c == target_n]) / N     on each rank's own columns: no communication
    """

    def forward(self, z, *, target: np.ndarray, lo: int, comm: Any, algorithm: str, check: bool):
        n, width = z.shape
        m = allreduce(comm, z.max(axis=1), algorithm, "max", check)
        e = np.exp(z - m[:, None])
        local = target - lo
        mine = (local >= 0) & (local < width)
        rows = np.flatnonzero(mine)
        sums = np.zeros((2, n), z.dtype)
        sums[0] = e.sum(axis=1)
        sums[1, rows] = z[rows, local[rows]]
        s, z_target = allreduce(comm, sums, algorithm, "sum", check)
        e /= s[:, None]  # softmax, this rank's columns
        self.save_for_backward(e, rows, local[rows], n)
        return np.asarray(np.mean(np.log(s) + m - z_target), dtype=z.dtype)

    def backward(self, g):
        softmax, rows, cols, n = self.saved_tensors
        grad = softmax * (g / n)  # a new array: the saved softmax must survive for a retain_graph backward
        grad[rows, cols] -= g / n
        return grad


def vocab_parallel_cross_entropy(
    logits: Tensor, target: Any, lo: int, comm: Any = None, algorithm: str = "ring", check: bool = True
) -> Tensor:
    """Mean cross entropy of ``logits`` [N, V_r] (classes ``lo .. lo + V_r - 1`` of all V) against ``target`` [N].

    Every rank passes the same target and gets the same loss; with the blocks of a ColumnParallelLinear
    (``gather_output=False``, ``lo = layer.out_range.start``) it equals ``F.cross_entropy`` of the whole logits.
    """
    target = np.asarray(target.data if isinstance(target, Tensor) else target)
    if logits.ndim != 2 or target.shape != (logits.shape[0],) or target.dtype.kind not in "iu":
        raise ValueError(
            f"vocab_parallel_cross_entropy: expected logits [N, V_r] and integer target [N], got "
            f"{logits.shape} and {target.dtype} {target.shape}"
        )
    if logits.shape[0] == 0:
        raise ValueError("vocab_parallel_cross_entropy: the mean over an empty batch is undefined")
    return VocabParallelCrossEntropy.apply(
        logits,
        target=target.astype(np.int64),
        lo=int(lo),
        comm=get_comm(comm),
        algorithm=check_algorithm(algorithm),
        check=check,
    )


# ----------------------------------------------------------------------------- a chain of units
def shard_last_unit(
    units: list[tuple[str, Module]], gather_output: bool, comm: Any = None, algorithm: str = "ring"
) -> tuple[list[tuple[str, Module]], ColumnParallelLinear, str]:
    """Tensor parallelism on a model's ``units()``: the last unit's Linear (a ResNet's classifier, a language
    model's [V, H] decoder) made column-parallel, split by output; the units before it stay replicated, the
    same computation on every rank. Returns the units, the parallel layer and its name in the dense model.
    ``gather_output=False`` leaves the logits split (for ``vocab_parallel_cross_entropy``)."""
    name, last = units[-1]
    make = lambda dense: ColumnParallelLinear.from_dense(
        dense, gather_output=gather_output, comm=comm, algorithm=algorithm
    )
    if isinstance(last, Linear):
        layer = make(last)
        return [*units[:-1], (name, layer)], layer, name
    for attr, child in list(last._modules.items()):
        if isinstance(child, Linear):
            setattr(last, attr, make(child))
            return units, getattr(last, attr), f"{name}.{attr}" if name else attr
    raise ValueError(f"shard_last_unit: the last unit ({type(last).__name__}) holds no Linear to split")


__all__ = [
    "ColumnParallelLinear",
    "ParallelMLP",
    "RowParallelLinear",
    "shard_last_unit",
    "copy_to_parallel_region",
    "gather_from_parallel_region",
    "gather_linear",
    "reduce_from_parallel_region",
    "scatter_to_parallel_region",
    "shard_linear",
    "shard_range",
    "vocab_parallel_cross_entropy",
]
