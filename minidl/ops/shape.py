"""Shape ops: they move values around; backward moves gradients back."""

from __future__ import annotations

import numpy as np

from minidl.tensor import Function


class Reshape(Function):
    def forward(self, a, shape):
        self.in_shape = a.shape
        try:
            return a.reshape(shape)
        except ValueError:
            raise ValueError(f"reshape: cannot reshape a tensor of shape {a.shape} into {tuple(shape)}") from None

    def backward(self, g):
        return g.reshape(self.in_shape)


class Transpose(Function):
    """Permute axes; ``axes=None`` reverses them (``.T``)."""

    def forward(self, a, axes=None):
        if axes is None:
            axes = tuple(reversed(range(a.ndim)))
        if sorted(int(x) % max(a.ndim, 1) for x in axes) != list(range(a.ndim)):
            raise ValueError(f"transpose: axes {tuple(axes)} are not a permutation of {a.ndim} dimensions")
        self.axes = tuple(int(x) % max(a.ndim, 1) for x in axes)
        return a.transpose(self.axes)

    def backward(self, g):
        return g.transpose(np.argsort(self.axes))


class GetItem(Function):
    """Indexing: basic slices, integer arrays (repeated indices accumulate), boolean masks."""

    def forward(self, a, index):
        self.in_shape, self.dtype, self.index = a.shape, a.dtype, index
        return a[index]

    def backward(self, g):
        out = np.zeros(self.in_shape, self.dtype)
        np.add.at(out, self.index, g)  # unbuffered: a repeated index gets every contribution
        return out
