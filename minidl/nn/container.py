"""Containers and shape helpers: Sequential, Identity, Flatten."""

from __future__ import annotations

from collections.abc import Iterator

from minidl.nn.module import Module
from minidl.tensor import Tensor


class Sequential(Module):
    """Sequential(*modules): applies them in order; children are named '0', '1', ... as in PyTorch."""

    def __init__(self, *modules: Module):
        super().__init__()
        for m in modules:
            self.append(m)

    def append(self, module: Module) -> Sequential:
        if not isinstance(module, Module):
            raise TypeError(f"Sequential: expected a Module, got {type(module).__name__}")
        self.add_module(str(len(self._modules)), module)
        return self

    def __len__(self) -> int:
        return len(self._modules)

    def __iter__(self) -> Iterator[Module]:
        return iter(self._modules.values())

    def __getitem__(self, idx: int | slice) -> Module:
        mods = list(self._modules.values())
        if isinstance(idx, slice):
            return Sequential(*mods[idx])
        if not -len(mods) <= idx < len(mods):
            raise IndexError(f"Sequential: index {idx} out of range for {len(mods)} modules")
        return mods[idx]

    def forward(self, x):
        for m in self._modules.values():
            x = m(x)
        return x


class Identity(Module):
    def forward(self, x):
        return x


class Flatten(Module):
    """Flatten(start_dim=1, end_dim=-1): merge dimensions start_dim..end_dim ([N, C, H, W] -> [N, C*H*W])."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1):
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Tensor) -> Tensor:
        return flatten(x, self.start_dim, self.end_dim)


def flatten(x: Tensor, start_dim: int = 1, end_dim: int = -1) -> Tensor:
    nd = x.ndim
    s, e = start_dim % max(nd, 1), end_dim % max(nd, 1)
    if not (-nd <= start_dim < nd and -nd <= end_dim < nd) or s > e:
        raise ValueError(f"flatten: bad dims start_dim={start_dim}, end_dim={end_dim} for a {nd}-D input")
    merged = 1
    for d in x.shape[s : e + 1]:
        merged *= d
    return x.reshape(x.shape[:s] + (merged,) + x.shape[e + 1 :])
