"""Parameter initialization, as PyTorch's ``torch.nn.init`` (in place on ``.data``).

PyTorch's layer defaults, which minidl's layers use:
  - Linear/Conv weights: ``kaiming_uniform_(w, a=sqrt(5))``, i.e. U(-b, b) with
    b = gain * sqrt(3 / fan_in), gain = sqrt(2 / (1 + a^2)), which for a = sqrt(5) is b = 1 / sqrt(fan_in);
  - their biases: U(-1/sqrt(fan_in), 1/sqrt(fan_in));
  - Embedding: N(0, 1); BatchNorm: weight 1, bias 0.
Zaremba et al. (2014) initialize every LSTM-LM parameter with ``uniform_(p, -0.1, 0.1)`` (small) or
``uniform_(p, -0.05, 0.05)`` / ``(-0.04, 0.04)`` (medium / large).
Every function takes an optional ``rng``; the default is ``minidl.random.default_generator()``.
"""

from __future__ import annotations

import math

import numpy as np

from minidl.random import default_generator
from minidl.tensor import Tensor


def _rng(rng: np.random.Generator | None) -> np.random.Generator:
    return rng if rng is not None else default_generator()


def calculate_fan_in_and_fan_out(shape: tuple[int, ...]) -> tuple[int, int]:
    """fan_in = in_features * receptive field, fan_out = out_features * receptive field.

    A weight is [out, in, *kernel] (Linear: [out, in]; Conv2d: [out, in, kh, kw]).
    """
    if len(shape) < 2:
        raise ValueError(f"fan in and fan out need a tensor with at least 2 dimensions, got shape {shape}")
    receptive = math.prod(shape[2:])
    return shape[1] * receptive, shape[0] * receptive


def uniform_(t: Tensor, a: float = 0.0, b: float = 1.0, rng: np.random.Generator | None = None) -> Tensor:
    """Fill ``t`` with U(a, b) samples (Zaremba's init: ``uniform_(p, -0.1, 0.1)``)."""
    t.data[...] = _rng(rng).uniform(a, b, size=t.shape)
    return t


def normal_(t: Tensor, mean: float = 0.0, std: float = 1.0, rng: np.random.Generator | None = None) -> Tensor:
    t.data[...] = _rng(rng).normal(mean, std, size=t.shape)
    return t


def constant_(t: Tensor, value: float) -> Tensor:
    t.data[...] = value
    return t


def zeros_(t: Tensor) -> Tensor:
    return constant_(t, 0.0)


def ones_(t: Tensor) -> Tensor:
    return constant_(t, 1.0)


def calculate_gain(nonlinearity: str, a: float = 0.0) -> float:
    """The std-preserving gain: relu sqrt(2), leaky_relu sqrt(2 / (1 + a^2)), linear/sigmoid/conv 1, tanh 5/3."""
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        return math.sqrt(2.0 / (1 + a * a))
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity in ("linear", "sigmoid", "conv2d"):
        return 1.0
    raise ValueError(f"calculate_gain: unknown nonlinearity {nonlinearity!r}")


def _fan(t: Tensor, mode: str) -> int:
    fan_in, fan_out = calculate_fan_in_and_fan_out(t.shape)
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"mode must be 'fan_in' or 'fan_out', got {mode!r}")
    return fan_in if mode == "fan_in" else fan_out


def kaiming_uniform_(
    t: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    rng: np.random.Generator | None = None,
) -> Tensor:
    """He et al. (2015): U(-b, b), b = gain * sqrt(3 / fan). PyTorch's layer default is a = sqrt(5)."""
    bound = calculate_gain(nonlinearity, a) * math.sqrt(3.0 / _fan(t, mode))
    return uniform_(t, -bound, bound, rng)


def kaiming_normal_(
    t: Tensor,
    a: float = 0.0,
    mode: str = "fan_in",
    nonlinearity: str = "leaky_relu",
    rng: np.random.Generator | None = None,
) -> Tensor:
    """He et al. (2015): N(0, std^2), std = gain / sqrt(fan)."""
    return normal_(t, 0.0, calculate_gain(nonlinearity, a) / math.sqrt(_fan(t, mode)), rng)


def default_weight_and_bias_(weight: Tensor, bias: Tensor | None, rng: np.random.Generator | None = None) -> None:
    """PyTorch's Linear/Conv default: kaiming_uniform_(a=sqrt(5)) weight, U(+-1/sqrt(fan_in)) bias."""
    kaiming_uniform_(weight, a=math.sqrt(5), rng=rng)
    if bias is not None:
        fan_in, _ = calculate_fan_in_and_fan_out(weight.shape)
        bound = 1.0 / math.sqrt(fan_in) if fan_in > 0 else 0.0
        uniform_(bias, -bound, bound, rng)
