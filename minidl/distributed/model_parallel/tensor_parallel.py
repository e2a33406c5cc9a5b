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
from minidl.nn.init import default_weight_and_bias_
from minidl.nn.linear import Linear, linear
from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype

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


def _shard_sizes(n: int, size: int) -> list[int]:
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
    return GatherFromParallelRegion.apply(x, comm=comm, sizes=_shard_sizes(n, comm.Get_size()))


def scatter_to_parallel_region(x: Tensor, comm: Any = None) -> Tensor:
    """This rank's block of x's last axis (split as ``shard_range``); the gradient is allgathered."""
    comm = get_comm(comm)
    return ScatterToParallelRegion.apply(x, comm=comm, sizes=_shard_sizes(x.shape[-1], comm.Get_size()))


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
        bias: bool,
        comm: Any,
        algorithm: str,
        check: bool,
        dtype: Any,
        dense: Linear | tuple[np.ndarray, np.ndarray | None] | None,
    ):
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
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        gather_output: bool = True,
        comm: Any = None,
        algorithm: str = "ring",
        check: bool = True,
        dtype: Any = None,
        dense: Linear | tuple[np.ndarray, np.ndarray | None] | None = None,
    ):
        super().__init__(in_features, out_features, bias, comm, algorithm, check, dtype, dense)
        self.gather_output = gather_output
        self.out_range = shard_range(out_features, self.rank, self.world)

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
        self,
        in_features: int,
        out_features: int,
        bias: bool = True,
        input_is_parallel: bool = True,
        comm: Any = None,
        algorithm: str = "ring",
        check: bool = True,
        dtype: Any = None,
        dense: Linear | tuple[np.ndarray, np.ndarray | None] | None = None,
    ):
        super().__init__(in_features, out_features, bias, comm, algorithm, check, dtype, dense)
        self.input_is_parallel = input_is_parallel
        self.in_range = shard_range(in_features, self.rank, self.world)

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
        sizes = _shard_sizes(layer.out_features, layer.world)
        weight = allgather_last_axis(layer.comm, np.ascontiguousarray(w.T), sizes).T.copy()
        return weight, None if b is None else allgather_last_axis(layer.comm, b, sizes)
    sizes = _shard_sizes(layer.in_features, layer.world)
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


# ----------------------------------------------------------------------------- the language model
class TensorParallelLM(Module):
    """An ``LSTMLanguageModel`` whose decoder and softmax are split over the ranks by vocabulary.

    The [V, H] decoder is the model's largest layer (V = 10,000 for PTB) and its softmax the costliest
    step; the LSTM's recurrence would need an exchange per time step if split, so embedding and LSTM are
    replicated: every rank runs them on the same batch (the same seed on every rank gives the same
    weights and dropout masks). The decoder is a ``ColumnParallelLinear`` without gather, its input
    passing through f, so backward allreduces dL/dh [T*B, H] once, and the replicated LSTM's gradients
    come out the same on every rank: no gradient allreduce. Per step the wire carries that and the
    loss's three numbers per word, never the [T*B, V] logits.

    ``forward(x [T, B], state) -> (logits block [T*B, V_r], state)``; ``loss(logits, y)`` the mean
    cross entropy over the whole vocabulary; ``sharded_parameters()`` / ``replicated_parameters()`` for
    ``clip_grad_norm_split``; ``dense_state_dict()`` the whole model's ``state_dict`` on every rank.
    """

    def __init__(self, model: Any, comm: Any = None, algorithm: str = "ring", check: bool = True):
        super().__init__()
        self.vocab_size, self.hidden_size, self.num_layers = model.vocab_size, model.hidden_size, model.num_layers
        self.embedding, self.drop, self.lstm = model.embedding, model.drop, model.lstm
        self.decoder = ColumnParallelLinear.from_dense(
            model.decoder, gather_output=False, comm=comm, algorithm=algorithm, check=check
        )
        self.detach_state = model.detach_state  # a staticmethod: holds no reference to the dense model

    def init_hidden(self, batch_size: int) -> tuple[Tensor, Tensor]:
        """Zero (h, c), each [L, B, H], in the parameters' dtype."""
        shape = (self.num_layers, batch_size, self.hidden_size)
        dtype = self.decoder.weight.dtype
        return Tensor(np.zeros(shape, dtype)), Tensor(np.zeros(shape, dtype))

    def forward(self, x: Any, state: Any = None):
        tokens = np.asarray(x.data if isinstance(x, Tensor) else x)
        T, B = tokens.shape
        out, state = self.lstm(self.drop(self.embedding(tokens)), state if state is not None else self.init_hidden(B))
        return self.decoder(self.drop(out).reshape(T * B, self.hidden_size)), state

    def loss(self, logits: Tensor, target: Any) -> Tensor:
        target = np.asarray(target.data if isinstance(target, Tensor) else target).reshape(-1)
        d = self.decoder
        return vocab_parallel_cross_entropy(logits, target, d.out_range.start, d.comm, d.algorithm, d.check)

    def sharded_parameters(self) -> list[Parameter]:
        return list(self.decoder.parameters())

    def replicated_parameters(self) -> list[Parameter]:
        return [*self.embedding.parameters(), *self.lstm.parameters()]

    def dense_state_dict(self) -> dict[str, np.ndarray]:
        """The whole model's ``state_dict`` (``LSTMLanguageModel``'s names), the decoder gathered, on every rank."""
        state = {k: v for k, v in self.state_dict().items() if not k.startswith("decoder.")}
        state["decoder.weight"], state["decoder.bias"] = gather_linear(self.decoder)
        return state


__all__ = [
    "ColumnParallelLinear",
    "ParallelMLP",
    "RowParallelLinear",
    "TensorParallelLM",
    "copy_to_parallel_region",
    "gather_from_parallel_region",
    "gather_linear",
    "reduce_from_parallel_region",
    "scatter_to_parallel_region",
    "shard_linear",
    "shard_range",
    "vocab_parallel_cross_entropy",
]
