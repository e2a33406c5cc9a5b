"""Batch normalization (Ioffe & Szegedy 2015), BatchNorm1d and BatchNorm2d, as PyTorch's.

Per channel c, over the M = N * (spatial size) values of the batch:

    train:  mu = mean(x),  var = mean((x - mu)^2)  (biased),  xhat = (x - mu) / sqrt(var + eps)
            y = gamma * xhat + beta
            running_mean <- (1 - momentum) running_mean + momentum mu
            running_var  <- (1 - momentum) running_var  + momentum var * M / (M - 1)   (unbiased)
    eval:   the same with running_mean and running_var in place of mu and var.

Closed-form backward of the training-mode function (mu and var depend on x):

    dbeta  = sum(dy),   dgamma = sum(dy * xhat)
    dx     = gamma / sqrt(var + eps) * (dy - sum(dy) / M - xhat * sum(dy * xhat) / M)

Distributed (synchronized) batch norm
-------------------------------------
The statistics are sums over the batch, so a data-parallel SyncBatchNorm only has to sum a few
per-channel arrays across ranks. Both places take the same hook, ``reduce``: a callable that gets a
float64 array and returns the elementwise sum of that array over all ranks (an allreduce; identity
on one process):

  * forward: ``batch_moments(x, reduce)`` passes it ``[sum(x), sum(x^2), M]`` (shape [3, C]) and
    derives the global mean and biased variance from the result;
  * backward: ``batch_norm_train(x, weight, bias, mean, var, count, eps, reduce)`` passes it
    ``[sum(dy), sum(dy * xhat)]`` (shape [2, C]) and uses the global sums and the global count M in
    dx. dgamma and dbeta stay local (the data-parallel optimizer averages them with the other
    gradients), as in PyTorch's SyncBatchNorm.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype

Reduce = Callable[[np.ndarray], np.ndarray]


def _channel_view(x: np.ndarray) -> np.ndarray:
    """[N, C, *spatial] -> [N, C, L] (a view), so per-channel sums are over axes (0, 2). L is spelled out:
    NumPy cannot infer a -1 from an empty array (N = 0, a rank's empty share of a SyncBatchNorm batch)."""
    return x.reshape(x.shape[0], x.shape[1], int(np.prod(x.shape[2:])))


def _per_channel(v: np.ndarray, ndim: int) -> np.ndarray:
    """[C] -> [1, C, 1, ...] broadcasting against an ndim-dimensional [N, C, ...] input."""
    return v.reshape((1, -1) + (1,) * (ndim - 2))


def channel_sum(x: np.ndarray, dtype=None) -> np.ndarray:
    """Per-channel sum of x [N, C, *spatial] -> [C]: first over the contiguous spatial axis (NumPy's pairwise
    summation, accurate in x's dtype), then over N in ``dtype``."""
    return _channel_view(x).sum(axis=2).sum(axis=0, dtype=dtype)


def batch_moments(x: np.ndarray, reduce: Reduce | None = None) -> tuple[np.ndarray, np.ndarray, int]:
    """Per-channel mean and biased variance of x [N, C, *spatial], and the count M they are over.

    Computed from float64 sums [sum(x), sum(x^2), M]; ``reduce`` (see the module docstring) may sum
    those over ranks first. var = sum(x^2)/M - mean^2, clipped at 0 against rounding. With ``reduce``
    an empty x (a rank's empty share of the batch) contributes zeros, as in PyTorch's SyncBatchNorm;
    only an empty global batch is an error (raised on every rank: they all hold the same M).
    """
    count = x.size // x.shape[1]
    if count == 0 and reduce is None:
        raise ValueError(f"batch_norm: empty input of shape {x.shape}")
    sums = np.stack(
        [
            channel_sum(x, np.float64),
            channel_sum(np.square(x), np.float64),
            np.full(x.shape[1], count, dtype=np.float64),
        ]
    )
    if reduce is not None:
        sums = reduce(sums)
    s, ss, m = sums
    if m[0] == 0:
        raise ValueError(f"batch_norm: empty input on every rank (this rank's has shape {x.shape})")
    mean = s / m
    var = np.maximum(ss / m - mean * mean, 0.0)
    return mean.astype(x.dtype), var.astype(x.dtype), int(m[0])


class BatchNormTrainFunction(Function):
    """y = gamma * (x - mean) / sqrt(var + eps) + beta with batch statistics (mean, var over ``count``
    values, possibly across ranks) given; backward by the closed form in the module docstring."""

    def forward(self, x, weight=None, bias=None, *, mean, var, count, eps, reduce=None):
        invstd = 1.0 / np.sqrt(var + np.asarray(eps, dtype=var.dtype))
        xhat = x - _per_channel(mean, x.ndim)
        xhat *= _per_channel(invstd, x.ndim)
        if weight is None:
            y = xhat.copy()
        else:
            y = xhat * _per_channel(weight, x.ndim)
            y += _per_channel(bias, x.ndim)
        self.save_for_backward(xhat, invstd, weight)
        self.count, self.reduce = count, reduce
        return y

    def backward(self, g):
        xhat, invstd, weight = self.saved_tensors
        sums = np.stack([channel_sum(g), channel_sum(g * xhat)])  # [sum(dy), sum(dy * xhat)]
        dbeta, dgamma = sums
        if self.reduce is not None:
            sums = self.reduce(sums.astype(np.float64)).astype(g.dtype)
        dx = None
        if self.needs_input_grad[0]:
            nd = g.ndim
            scale = invstd if weight is None else weight * invstd
            dx = xhat * _per_channel(-sums[1] / self.count, nd)
            dx += g
            dx -= _per_channel(sums[0] / self.count, nd)
            dx *= _per_channel(scale, nd)
        if weight is None:
            return dx
        return (dx, dgamma if self.needs_input_grad[1] else None, dbeta if self.needs_input_grad[2] else None)


def batch_norm_train(
    x: Tensor,
    weight: Tensor | None,
    bias: Tensor | None,
    mean: np.ndarray,
    var: np.ndarray,
    count: int,
    eps: float = 1e-5,
    reduce: Reduce | None = None,
) -> Tensor:
    """Normalize x with given batch statistics (from ``batch_moments``); ``reduce`` sums the backward's
    per-channel sums across ranks (SyncBatchNorm), None on one process."""
    kw = {"mean": mean, "var": var, "count": count, "eps": eps, "reduce": reduce}
    if weight is None:
        return BatchNormTrainFunction.apply(x, **kw)
    return BatchNormTrainFunction.apply(x, weight, bias, **kw)


def batch_norm(
    x: Tensor,
    running_mean: np.ndarray | None,
    running_var: np.ndarray | None,
    weight: Tensor | None = None,
    bias: Tensor | None = None,
    training: bool = False,
    momentum: float | None = 0.1,
    eps: float = 1e-5,
    num_batches_tracked: np.ndarray | None = None,
    reduce: Reduce | None = None,
) -> Tensor:
    """PyTorch's F.batch_norm: batch statistics when ``training`` (updating the running arrays in place,
    if given), else the running statistics. x is [N, C] or [N, C, *spatial].

    ``momentum=None`` gives the cumulative average (factor 1 / num_batches_tracked), as PyTorch.
    """
    if x.ndim < 2:
        raise ValueError(f"batch_norm: expected an input [N, C, ...] with at least 2 dimensions, got shape {x.shape}")
    c = x.shape[1]
    if (weight is None) != (bias is None):
        raise ValueError("batch_norm: give both weight and bias (affine) or neither")
    for name, a in (("weight", weight), ("bias", bias), ("running_mean", running_mean), ("running_var", running_var)):
        if a is not None and tuple(a.shape) != (c,):
            raise ValueError(f"batch_norm: {name} must have shape ({c},) for input of shape {x.shape}, got {a.shape}")
    if training:
        mean, var, count = batch_moments(x.data, reduce)
        if count < 2:
            over_ranks = f" ({count} over all ranks)" if reduce is not None else ""
            raise ValueError(
                f"batch_norm: expected more than 1 value per channel when training, got input shape "
                f"{x.shape}{over_ranks}"
            )
        if running_mean is not None:
            if num_batches_tracked is not None:
                num_batches_tracked += 1
            f = momentum if momentum is not None else 1.0 / float(num_batches_tracked)
            running_mean *= 1 - f
            running_mean += f * mean
            running_var *= 1 - f
            running_var += (f * count / (count - 1)) * var
        return batch_norm_train(x, weight, bias, mean, var, count, eps, reduce)
    if running_mean is None or running_var is None:
        raise ValueError("batch_norm: evaluation mode needs running_mean and running_var")
    # y = x * scale + shift, scale = gamma / sqrt(running_var + eps), shift = beta - running_mean * scale
    invstd = Tensor(1.0 / np.sqrt(running_var + np.asarray(eps, dtype=running_var.dtype)))
    scale = invstd if weight is None else weight * invstd
    shift = -Tensor(running_mean) * scale if bias is None else bias - Tensor(running_mean) * scale
    shape = (1, c) + (1,) * (x.ndim - 2)
    return x * scale.reshape(shape) + shift.reshape(shape)


class _BatchNorm(Module):
    """Shared by BatchNorm1d and BatchNorm2d; ``expected_dims`` is the accepted input ranks."""

    expected_dims: tuple[int, ...] = ()

    def __init__(
        self,
        num_features: int,
        eps: float = 1e-5,
        momentum: float | None = 0.1,
        affine: bool = True,
        track_running_stats: bool = True,
        dtype=None,
    ):
        super().__init__()
        if num_features < 1:
            raise ValueError(f"{type(self).__name__}: num_features must be >= 1, got {num_features}")
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        dtype = dtype or get_default_dtype()
        self.weight = Parameter(np.ones(num_features, dtype=dtype)) if affine else None
        self.bias = Parameter(np.zeros(num_features, dtype=dtype)) if affine else None
        if track_running_stats:
            self.register_buffer("running_mean", np.zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", np.ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", np.zeros((), dtype=np.int64))
        else:
            self.running_mean = self.running_var = self.num_batches_tracked = None

    def reset_running_stats(self) -> None:
        if self.track_running_stats:
            self.running_mean[...] = 0
            self.running_var[...] = 1
            self.num_batches_tracked[...] = 0

    def input_problem(self, shape: tuple[int, ...]) -> str | None:
        """What is wrong with an input of this shape (None: nothing). SyncBatchNorm asks it of every rank's."""
        if len(shape) not in self.expected_dims or shape[1] != self.num_features:
            dims = " or ".join(f"{d}-D" for d in self.expected_dims)
            return f"expected a {dims} input with {self.num_features} channels in dimension 1, got shape {shape}"
        return None

    def check_input(self, x: Tensor) -> None:
        problem = self.input_problem(tuple(x.shape))
        if problem is not None:
            raise ValueError(f"{type(self).__name__}({self.num_features}): {problem}")

    def forward(self, x: Tensor, reduce: Reduce | None = None) -> Tensor:
        self.check_input(x)
        use_batch_stats = self.training or not self.track_running_stats
        update = self.training and self.track_running_stats
        return batch_norm(
            x,
            self.running_mean if update or not use_batch_stats else None,
            self.running_var if update or not use_batch_stats else None,
            self.weight,
            self.bias,
            use_batch_stats,
            self.momentum,
            self.eps,
            self.num_batches_tracked if update else None,
            reduce,
        )

    def extra_repr(self) -> str:
        return (
            f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, affine={self.affine}, "
            f"track_running_stats={self.track_running_stats}"
        )


class BatchNorm1d(_BatchNorm):
    """BatchNorm1d(num_features): input [N, C] or [N, C, L], statistics per channel C."""

    expected_dims = (2, 3)


class BatchNorm2d(_BatchNorm):
    """BatchNorm2d(num_features): input [N, C, H, W], statistics per channel C."""

    expected_dims = (4,)
