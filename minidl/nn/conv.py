"""2-D convolution (cross-correlation, as in every framework), NCHW, via im2col and one matrix product.

    out[n, o, oh, ow] = b[o] + sum_{c, i, j} W[o, c, i, j] * x_pad[n, c, s*oh + i, s*ow + j]

With cols = im2col(x) viewed as [N, K, P] (K = C*kh*kw, P = OH*OW) and W as [O, K]:

    forward:   out[n]  = W @ cols[n]                    (one batched matmul; lands in NCHW order)
    backward:  dW      = sum_n dout[n] @ cols[n]^T      [O, K]
               db      = sum over n, oh, ow of dout     [O]
               dcols[n] = W^T @ dout[n]                  [K, P], and dx = col2im(dcols)

The per-sample layout [N, K, P] (rather than one [K, N*P] matrix) lets the output come out
NCHW with no transpose of the large arrays; np.matmul runs it as one BLAS GEMM per sample.
"""

from __future__ import annotations

import numpy as np

from minidl.nn import init
from minidl.nn.im2col import check_window, col2im, im2col, pair
from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype


class Conv2dFunction(Function):
    """Fused convolution: inputs (x, weight) or (x, weight, bias); hand-written backward."""

    def forward(self, x, weight, bias=None, *, stride=(1, 1), padding=(0, 0)):
        if weight.ndim != 4:
            raise ValueError(f"conv2d: weight must be 4-D [out, in, kh, kw], got shape {weight.shape}")
        o, c, kh, kw = weight.shape
        if x.ndim != 4 or x.shape[1] != c:
            raise ValueError(f"conv2d: expected input [N, {c}, H, W] for weight of shape {weight.shape}, "
                             f"got shape {x.shape}")
        if x.dtype != weight.dtype:
            raise TypeError(f"conv2d: input dtype {x.dtype} differs from weight dtype {weight.dtype}")
        if bias is not None and bias.shape != (o,):
            raise ValueError(f"conv2d: bias must have shape ({o},), got {bias.shape}")
        n = x.shape[0]
        oh, ow = check_window(x.shape, (kh, kw), stride, padding, "conv2d")
        cols = im2col(x, (kh, kw), stride, padding).reshape(n, c * kh * kw, oh * ow)
        out = np.matmul(weight.reshape(o, -1), cols)  # [N, O, OH*OW]
        if bias is not None:
            out += bias[:, None]
        self.save_for_backward(cols, weight)
        self.x_shape, self.stride, self.padding = x.shape, stride, padding
        return out.reshape(n, o, oh, ow)

    def backward(self, g):
        cols, weight = self.saved_tensors
        n, o, oh, ow = g.shape
        g = g.reshape(n, o, oh * ow)
        w2 = weight.reshape(o, -1)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dcols = np.matmul(w2.T, g)  # [N, K, P]
            _, c, kh, kw = weight.shape
            dx = col2im(dcols.reshape(n, c, kh, kw, oh, ow), self.x_shape, self.stride, self.padding)
        if self.needs_input_grad[1]:
            dw = np.matmul(g, cols.transpose(0, 2, 1)).sum(axis=0).reshape(weight.shape)
        if len(self.parents) == 3 and self.needs_input_grad[2]:
            db = g.sum(axis=(0, 2))
        return (dx, dw) if len(self.parents) == 2 else (dx, dw, db)


def conv2d(x: Tensor, weight: Tensor, bias: Tensor | None = None, stride: int | tuple[int, int] = 1,
           padding: int | tuple[int, int] = 0) -> Tensor:
    """x [N, C, H, W], weight [O, C, kh, kw], bias [O] or None -> [N, O, OH, OW]."""
    kw = {"stride": pair(stride, "stride"), "padding": pair(padding, "padding")}
    if bias is None:
        return Conv2dFunction.apply(x, weight, **kw)
    return Conv2dFunction.apply(x, weight, bias, **kw)


class Conv2d(Module):
    """Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True), NCHW.

    weight [out, in, kh, kw], bias [out]; PyTorch's default init (kaiming_uniform_ a=sqrt(5)).
    """

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] = 0, bias: bool = True,
                 dtype=None):
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"Conv2d: channels must be >= 1, got in={in_channels}, out={out_channels}")
        self.in_channels, self.out_channels = in_channels, out_channels
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride, self.padding = pair(stride, "stride"), pair(padding, "padding")
        dtype = dtype or get_default_dtype()
        self.weight = Parameter(np.empty((out_channels, in_channels, *self.kernel_size), dtype=dtype))
        self.bias = Parameter(np.empty(out_channels, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_weight_and_bias_(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        return conv2d(x, self.weight, self.bias, self.stride, self.padding)

    def extra_repr(self) -> str:
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
                f"padding={self.padding}, bias={self.bias is not None}")
