"""Activation modules, as PyTorch names them; each calls its op in minidl/ops/activation.py (formulas there)."""

from __future__ import annotations

from minidl.nn.module import Module
from minidl.ops import activation as ops
from minidl.ops.activation import *  # noqa: F403  (the functional forms, re-exported)
from minidl.tensor import Tensor

__all__ = [
    "CELU", "ELU", "GELU", "Hardswish", "LeakyReLU", "Mish", "ReLU", "ReLU6", "SiLU", "Sigmoid", "Softplus",
    "Softsign", "Tanh",
    *ops.__all__,
]  # fmt: skip


def _no_inplace(name: str, inplace: bool) -> None:
    if inplace:
        raise ValueError(f"{name}: not supported: inplace=True (minidl ops never overwrite their input)")


class ReLU(Module):
    """max(x, 0) elementwise."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("ReLU", inplace)

    def forward(self, x: Tensor) -> Tensor:
        return ops.relu(x)


class ReLU6(Module):
    """min(max(x, 0), 6) elementwise (MobileNet's activation)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("ReLU6", inplace)

    def forward(self, x: Tensor) -> Tensor:
        return ops.relu6(x)


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return ops.tanh(x)


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.sigmoid(x)


class LeakyReLU(Module):
    def __init__(self, negative_slope: float = 0.01, inplace: bool = False):
        super().__init__()
        _no_inplace("LeakyReLU", inplace)
        self.negative_slope = negative_slope

    def forward(self, x: Tensor) -> Tensor:
        return ops.leaky_relu(x, self.negative_slope)

    def extra_repr(self) -> str:
        return f"negative_slope={self.negative_slope}"


class ELU(Module):
    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        _no_inplace("ELU", inplace)
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return ops.elu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class CELU(Module):
    """x if x > 0 else alpha (e^(x/alpha) - 1)."""

    def __init__(self, alpha: float = 1.0, inplace: bool = False):
        super().__init__()
        _no_inplace("CELU", inplace)
        if alpha == 0:
            raise ValueError("CELU: alpha must not be 0 (the input is divided by it)")
        self.alpha = alpha

    def forward(self, x: Tensor) -> Tensor:
        return ops.celu(x, self.alpha)

    def extra_repr(self) -> str:
        return f"alpha={self.alpha}"


class Softsign(Module):
    """x / (1 + |x|) elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return ops.softsign(x)


class GELU(Module):
    """x Phi(x); ``approximate="tanh"`` for the tanh form."""

    def __init__(self, approximate: str = "none"):
        super().__init__()
        if approximate not in ("none", "tanh"):
            raise ValueError(f"GELU: approximate must be 'none' or 'tanh', got {approximate!r}")
        self.approximate = approximate

    def forward(self, x: Tensor) -> Tensor:
        return ops.gelu(x, self.approximate)

    def extra_repr(self) -> str:
        return f"approximate={self.approximate!r}"


class Softplus(Module):
    def __init__(self, beta: float = 1.0, threshold: float = 20.0):
        super().__init__()
        self.beta, self.threshold = beta, threshold

    def forward(self, x: Tensor) -> Tensor:
        return ops.softplus(x, self.beta, self.threshold)

    def extra_repr(self) -> str:
        return f"beta={self.beta}, threshold={self.threshold}"


class SiLU(Module):
    """x sigmoid(x) (also called swish)."""

    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("SiLU", inplace)

    def forward(self, x: Tensor) -> Tensor:
        return ops.silu(x)


class Hardswish(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("Hardswish", inplace)

    def forward(self, x: Tensor) -> Tensor:
        return ops.hardswish(x)


class Mish(Module):
    def __init__(self, inplace: bool = False):
        super().__init__()
        _no_inplace("Mish", inplace)

    def forward(self, x: Tensor) -> Tensor:
        return ops.mish(x)
