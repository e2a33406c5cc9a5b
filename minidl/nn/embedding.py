"""Embedding: a lookup table, out[...] = W[indices[...]], with a sparse-aware gradient.

Only the looked-up rows of dW are non-zero, so the backward scatters the output gradient
into those rows (``np.add.at`` sums repeated indices) instead of forming a one-hot matmul.
"""

from __future__ import annotations

import numpy as np

from minidl.nn import init
from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype


def check_indices(indices: np.ndarray, num_embeddings: int) -> np.ndarray:
    """Integer indices in [0, num_embeddings), or a TypeError/IndexError naming the problem."""
    indices = np.asarray(indices)
    if indices.dtype.kind not in "iu":
        raise TypeError(f"embedding: indices must be integers, got dtype {indices.dtype}")
    if indices.size and (indices.min() < 0 or indices.max() >= num_embeddings):
        raise IndexError(
            f"embedding: indices must lie in [0, {num_embeddings}), got values in [{indices.min()}, {indices.max()}]"
        )
    return indices


class EmbeddingFunction(Function):
    """out = W[indices];  dW[r] = sum of dout at the positions where indices == r (r != padding_idx)."""

    fresh_grads = True  # dW is a new array: the engine may adopt it as .grad

    def forward(self, weight, *, indices, padding_idx=None):
        if weight.ndim != 2:
            raise ValueError(f"embedding: weight must be 2-D [num_embeddings, dim], got shape {weight.shape}")
        self.indices = check_indices(indices, weight.shape[0])
        self.weight_shape, self.padding_idx = weight.shape, padding_idx
        return weight[self.indices]

    def backward(self, g):
        idx = self.indices.reshape(-1)
        g = g.reshape(-1, g.shape[-1])
        if self.padding_idx is not None:
            keep = idx != self.padding_idx
            idx, g = idx[keep], g[keep]
        # Zeroed by a write, not np.zeros: calloc maps fresh zero pages, which then fault one by one in the
        # scatter, the norm of the gradient clipping and the optimizer (~700 page faults a step for the LM's
        # 8 MB table); a written buffer comes from, and goes back to, malloc's reused memory.
        dw = np.empty(self.weight_shape, dtype=g.dtype)
        dw.fill(0)
        # dw[idx[k]] += g[k] for every k, repeated indices accumulating: sort the rows by index and add each
        # run of equal indices with one reduceat (0.43 against 0.72 ms for np.add.at at the LM's 400 rows, measured)
        if len(idx):
            order = np.argsort(idx, kind="stable")
            sorted_idx = idx[order]
            starts = np.flatnonzero(np.r_[True, sorted_idx[1:] != sorted_idx[:-1]])
            dw[sorted_idx[starts]] = np.add.reduceat(g[order], starts, axis=0)
        return dw


def embedding(indices, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """indices (int array or Tensor, any shape), weight [num, dim] -> [*indices.shape, dim]."""
    if isinstance(indices, Tensor):
        indices = indices.data
    return EmbeddingFunction.apply(weight, indices=indices, padding_idx=padding_row(padding_idx, weight.shape[0]))


def padding_row(padding_idx: int | None, num_embeddings: int) -> int | None:
    """padding_idx in [-num, num) -> the row it names in [0, num) (-1 is the last row, as PyTorch)."""
    if padding_idx is None:
        return None
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"embedding: padding_idx {padding_idx} out of range for {num_embeddings} rows")
    return int(padding_idx) % num_embeddings


def _unsupported(max_norm: float | None, scale_grad_by_freq: bool) -> None:
    for name, value, default in (("max_norm", max_norm, None), ("scale_grad_by_freq", scale_grad_by_freq, False)):
        if value != default:
            raise NotImplementedError(f"Embedding: not supported: {name}={value!r}")


class Embedding(Module):
    """Embedding(num_embeddings, embedding_dim, padding_idx=None); weight ~ N(0, 1) as PyTorch.

    With ``padding_idx``, that row starts at zero and never receives a gradient. ``max_norm`` and
    ``scale_grad_by_freq`` are not supported (an error says so).

    ``sparse=True`` marks the weight ``sparse_grad``: its gradient is still a dense array here (only the
    looked-up rows non-zero), so every optimizer and ``clip_grad_norm`` take it as they are, but data
    parallelism exchanges just its non-zero rows, an allgather instead of an allreduce of the whole table
    (``minidl.distributed.data_parallel.sparse_rows``). PyTorch's ``sparse=True`` makes a sparse gradient
    tensor instead, which DDP exchanges the same way but ``clip_grad_norm_`` refuses.
    """

    def __init__(
        self,
        num_embeddings: int,
        embedding_dim: int,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
        dtype=None,
        _weight: np.ndarray | None = None,
    ):
        super().__init__()
        _unsupported(max_norm, scale_grad_by_freq)
        if num_embeddings < 1 or embedding_dim < 1:
            raise ValueError(f"Embedding: sizes must be >= 1, got {num_embeddings}, {embedding_dim}")
        padding_idx = padding_row(padding_idx, num_embeddings)
        self.num_embeddings, self.embedding_dim, self.padding_idx = num_embeddings, embedding_dim, padding_idx
        if _weight is None:
            self.weight = Parameter(np.empty((num_embeddings, embedding_dim), dtype=dtype or get_default_dtype()))
            self.reset_parameters()
        else:  # from_pretrained: the given rows, no random draw (as PyTorch's _weight)
            self.weight = Parameter(_weight)
        self.sparse = bool(sparse)
        self.weight.sparse_grad = self.sparse  # read by data parallelism's fusion plan (see the class docstring)

    @classmethod
    def from_pretrained(
        cls,
        embeddings,
        freeze: bool = True,
        padding_idx: int | None = None,
        max_norm: float | None = None,
        norm_type: float = 2.0,
        scale_grad_by_freq: bool = False,
        sparse: bool = False,
    ) -> Embedding:
        """An Embedding holding a copy of ``embeddings`` [num, dim] (its dtype kept; padding row kept as given,
        as PyTorch); ``freeze`` (the default) turns off its gradient, so optimizers leave it as it is."""
        w = np.asarray(embeddings.data if isinstance(embeddings, Tensor) else embeddings)
        if w.ndim != 2 or w.dtype.kind != "f":
            raise ValueError(
                f"Embedding.from_pretrained: embeddings must be a 2-D float array, got {w.shape} {w.dtype}"
            )
        emb = cls(w.shape[0], w.shape[1], padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse, _weight=w)
        emb.weight.requires_grad = not freeze
        return emb

    def reset_parameters(self) -> None:
        init.normal_(self.weight)
        if self.padding_idx is not None:
            self.weight.data[self.padding_idx] = 0

    def forward(self, indices) -> Tensor:
        return embedding(indices, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        pad = f", padding_idx={self.padding_idx}" if self.padding_idx is not None else ""
        return f"{self.num_embeddings}, {self.embedding_dim}{pad}" + (", sparse=True" if self.sparse else "")
