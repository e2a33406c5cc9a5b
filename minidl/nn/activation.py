"""Activation modules (the functions themselves are Tensor methods: x.relu(), x.tanh(), x.sigmoid())."""

from __future__ import annotations

from minidl.nn.module import Module
from minidl.tensor import Tensor


class ReLU(Module):
    """max(x, 0) elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return x.relu()


class Tanh(Module):
    def forward(self, x: Tensor) -> Tensor:
        return x.tanh()


class Sigmoid(Module):
    """1 / (1 + exp(-x)) elementwise."""

    def forward(self, x: Tensor) -> Tensor:
        return x.sigmoid()


def relu(x: Tensor) -> Tensor:
    return x.relu()
