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
from minidl.nn.conv_implicit import ImplicitConv2dFunction
from minidl.nn.im2col import check_conv_args, check_window, col2im, im2col, pair
from minidl.nn.module import Module, Parameter
from minidl.tensor import Function, Tensor, get_default_dtype


class Conv2dFunction(Function):
    """Fused convolution: inputs (x, weight) or (x, weight, bias); hand-written backward."""

    def forward(self, x, weight, bias=None, *, stride=(1, 1), padding=(0, 0)):
        check_conv_args(x, weight, bias)
        o, c, kh, kw = weight.shape
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


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] = 0,
    method: str = "auto",
) -> Tensor:
    """x [N, C, H, W], weight [O, C, kh, kw], bias [O] or None -> [N, O, OH, OW].

    ``method``: "im2col" (explicit im2col and one matmul, any stride), "implicit" (stride 1 only: the
    im2col matmul split into kh*kw matmuls over shifted views, see conv_implicit.py), or "auto"
    (implicit where it applies, which is faster and uses less memory; im2col otherwise).
    """
    stride, padding = pair(stride, "stride"), pair(padding, "padding")
    if method not in ("auto", "im2col", "implicit"):
        raise ValueError(f"conv2d: method must be 'auto', 'im2col' or 'implicit', got {method!r}")
    implicit_ok = stride == (1, 1) and all(p < k for p, k in zip(padding, weight.shape[2:]))
    if method == "implicit" and not implicit_ok:
        raise ValueError(
            f"conv2d: the implicit method needs stride 1 and padding < kernel size, got "
            f"stride={stride}, padding={padding}, kernel {tuple(weight.shape[2:])}"
        )
    if method == "implicit" or (method == "auto" and implicit_ok):
        fn, kw = ImplicitConv2dFunction, {"padding": padding}
    else:
        fn, kw = Conv2dFunction, {"stride": stride, "padding": padding}
    return fn.apply(x, weight, **kw) if bias is None else fn.apply(x, weight, bias, **kw)


class Conv2d(Module):
    """Conv2d(in_channels, out_channels, kernel_size, stride=1, padding=0, bias=True), NCHW.

    weight [out, in, kh, kw], bias [out]; PyTorch's default init (kaiming_uniform_ a=sqrt(5)).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, int] = 0,
        bias: bool = True,
        dtype=None,
    ):
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
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}, bias={self.bias is not None}"
        )
