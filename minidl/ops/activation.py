"""Activation functions, each with its derivative beside it (formulas and tie rules as PyTorch's).

relu(x) = max(x, 0)                           d = [x > 0]
leaky_relu(x) = x if x > 0 else s x           d = 1 if x > 0 else s
relu6(x) = min(max(x, 0), 6)                  d = [0 < x < 6]  (0 at both kinks, as PyTorch's hardtanh)
elu(x) = x if x > 0 else a (e^x - 1)          d = 1 if x > 0 else a e^x
celu(x) = x if x > 0 else a (e^(x/a) - 1)     d = 1 if x > 0 else e^(x/a)   (elu of x/a scaled by a below 0)
softsign(x) = x / (1 + |x|)                   d = 1 / (1 + |x|)^2
gelu(x) = x Phi(x)                            d = Phi(x) + x phi(x)      (Phi, phi: the normal cdf and pdf)
gelu_tanh(x) = x/2 (1 + tanh(u)),  u = sqrt(2/pi) (x + 0.044715 x^3)
softplus(x) = log(1 + e^(b x)) / b            d = sigmoid(b x); x itself where b x > threshold
silu(x) = x sigmoid(x)                        d = s (1 + x (1 - s))
hardswish(x) = x relu6(x + 3) / 6             d = 0 up to -3, x/3 + 1/2 between, 1 from 3 on
mish(x) = x tanh(softplus(x))                 d = t + x (1 - t^2) sigmoid(x)
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from minidl.autograd import Function
from minidl.tensor import Tensor

_erf_objects = np.frompyfunc(math.erf, 1, 1)


def normal_cdf(a: np.ndarray) -> np.ndarray:
    """Phi(a) = (1 + erf(a / sqrt 2)) / 2. NumPy has no erf; math.erf, element by element, is exact to the last
    bit (about 0.1 us per element: fine for a reference, the one slow activation)."""
    erf = np.asarray(_erf_objects(a / math.sqrt(2.0)), dtype=a.dtype)
    return 0.5 * (1 + erf)


def sigmoid_array(a: np.ndarray) -> np.ndarray:
    """1 / (1 + exp(-a)), computed without overflow for large |a|."""
    return 0.5 * (np.tanh(0.5 * a) + 1)


def softplus_array(z: np.ndarray) -> np.ndarray:
    """log(1 + exp(z)) = max(z, 0) + log1p(exp(-|z|)), finite for any z."""
    return np.maximum(z, 0) + np.log1p(np.exp(-np.abs(z)))


class Tanh(Function):
    def forward(self, a):
        out = np.tanh(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * (1 - out * out)  # d tanh = 1 - tanh^2


class Sigmoid(Function):
    def forward(self, a):
        out = sigmoid_array(a)
        self.save_for_backward(out)
        return out

    def backward(self, g):
        (out,) = self.saved_tensors
        return g * out * (1 - out)  # d sigma = sigma (1 - sigma)


def relu_array(a: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    """max(a, 0). The zeros are a row as long as a's last axis, broadcast over the others: NumPy's maximum
    against a scalar 0 takes a slower loop than against an array (0.21 against 0.39 ms at 64x16x32x32, and
    a * (a > 0) 0.41 ms, measured)."""
    return np.maximum(a, np.zeros(a.shape[-1:], dtype=a.dtype), out=out)


class ReLU(Function):
    def forward(self, a):
        self.save_for_backward(a > 0)
        return relu_array(a)

    def backward(self, g):
        (mask,) = self.saved_tensors
        return g * mask


class LeakyReLU(Function):
    def forward(self, a, negative_slope=0.01):
        self.slope = np.asarray(negative_slope, a.dtype)
        pos = a > 0
        self.save_for_backward(pos)
        return np.where(pos, a, a * self.slope)

    def backward(self, g):
        (pos,) = self.saved_tensors
        return np.where(pos, g, g * self.slope)


class ReLU6(Function):
    def forward(self, a):
        self.save_for_backward((a > 0) & (a < 6))
        return np.clip(a, 0, 6)

    def backward(self, g):
        (inside,) = self.saved_tensors
        return g * inside


class ELU(Function):
    """elu, and celu as elu with ``input_scale`` 1/alpha: x if x > 0 else alpha (e^(s x) - 1)."""

    def forward(self, a, alpha=1.0, input_scale=1.0):
        self.alpha, self.input_scale = np.asarray(alpha, a.dtype), np.asarray(input_scale, a.dtype)
        pos = a > 0
        scaled_exp = self.alpha * np.exp(np.minimum(a, 0) * self.input_scale)  # a e^(s x), never overflowing
        self.save_for_backward(pos, scaled_exp)
        return np.where(pos, a, scaled_exp - self.alpha)

    def backward(self, g):
        pos, scaled_exp = self.saved_tensors
        return np.where(pos, g, g * scaled_exp * self.input_scale)


class Softsign(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return a / (1 + np.abs(a))

    def backward(self, g):
        (a,) = self.saved_tensors
        return g / np.square(1 + np.abs(a))


class GELU(Function):
    """approximate="none": x Phi(x) with the exact normal cdf; "tanh": PyTorch's tanh approximation."""

    K = math.sqrt(2.0 / math.pi)

    def forward(self, a, approximate="none"):
        if approximate not in ("none", "tanh"):
            raise ValueError(f"gelu: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate
        self.save_for_backward(a)
        if approximate == "tanh":
            return 0.5 * a * (1 + np.tanh(self.K * (a + 0.044715 * a**3)))
        return a * normal_cdf(a)

    def backward(self, g):
        (a,) = self.saved_tensors
        if self.approximate == "tanh":
            t = np.tanh(self.K * (a + 0.044715 * a**3))
            return g * (0.5 * (1 + t) + 0.5 * a * (1 - t * t) * self.K * (1 + 3 * 0.044715 * a * a))
        pdf = np.exp(-0.5 * a * a) / math.sqrt(2 * math.pi)
        return g * (normal_cdf(a) + a * pdf)


class Softplus(Function):
    def forward(self, a, beta=1.0, threshold=20.0):
        z = a * np.asarray(beta, a.dtype)
        linear = z > threshold  # PyTorch returns x itself there (log(1 + e^z) = z to working precision)
        self.save_for_backward(z, linear)
        return np.where(linear, a, softplus_array(z) / np.asarray(beta, a.dtype))

    def backward(self, g):
        z, linear = self.saved_tensors
        return np.where(linear, g, g * sigmoid_array(z))


class SiLU(Function):
    def forward(self, a):
        s = sigmoid_array(a)
        self.save_for_backward(a, s)
        return a * s

    def backward(self, g):
        a, s = self.saved_tensors
        return g * s * (1 + a * (1 - s))


class Hardswish(Function):
    def forward(self, a):
        self.save_for_backward(a)
        return a * np.clip(a + 3, 0, 6) / 6

    def backward(self, g):
        (a,) = self.saved_tensors
        return g * np.where(a <= -3, 0, np.where(a < 3, a / 3 + 0.5, 1)).astype(g.dtype, copy=False)


class Mish(Function):
    def forward(self, a):
        t = np.tanh(softplus_array(a))
        self.save_for_backward(a, t)
        return a * t

    def backward(self, g):
        a, t = self.saved_tensors
        return g * (t + a * (1 - t * t) * sigmoid_array(a))


def tanh(x: Any) -> Tensor:
    return Tanh.apply(x)


def sigmoid(x: Any) -> Tensor:
    return Sigmoid.apply(x)


def relu(x: Any) -> Tensor:
    return ReLU.apply(x)


def relu6(x: Any) -> Tensor:
    return ReLU6.apply(x)


def leaky_relu(x: Any, negative_slope: float = 0.01) -> Tensor:
    return LeakyReLU.apply(x, negative_slope=negative_slope)


def elu(x: Any, alpha: float = 1.0) -> Tensor:
    return ELU.apply(x, alpha=alpha)


def celu(x: Any, alpha: float = 1.0) -> Tensor:
    """x if x > 0 else alpha (e^(x/alpha) - 1): continuously differentiable elu (Barron, 2017)."""
    if alpha == 0:
        raise ValueError("celu: alpha must not be 0 (the input is divided by it)")
    return ELU.apply(x, alpha=alpha, input_scale=1.0 / alpha)


def softsign(x: Any) -> Tensor:
    return Softsign.apply(x)


def gelu(x: Any, approximate: str = "none") -> Tensor:
    return GELU.apply(x, approximate=approximate)


def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0) -> Tensor:
    return Softplus.apply(x, beta=beta, threshold=threshold)


def silu(x: Any) -> Tensor:
    return SiLU.apply(x)


def hardswish(x: Any) -> Tensor:
    return Hardswish.apply(x)


def mish(x: Any) -> Tensor:
    return Mish.apply(x)


# The functional forms: what ``from minidl.ops.activation import *`` gives, and so what minidl.ops, nn.activation
# and nn.functional re-export (this list is the only one)
__all__ = [
    "celu", "elu", "gelu", "hardswish", "leaky_relu", "mish", "relu", "relu6", "sigmoid", "silu", "softplus",
    "softsign", "tanh",
]  # fmt: skip
