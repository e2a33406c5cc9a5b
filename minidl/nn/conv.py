"""2-D convolution (cross-correlation, as in every framework), NCHW: the textbook im2col version, and the
three faster ones that ``conv2d``'s default runs for most layers.

    out[n, o, oh, ow] = b[o] + sum_{c, i, j} W[o, c, i, j] * x_pad[n, c, s*oh + i, s*ow + j]

The textbook version, im2col (``Conv2dFunction``, this file). With cols = im2col(x) viewed as
[N, K, P] (K = C*kh*kw, P = OH*OW) and W as [O, K]:

    forward:   out[n]  = W @ cols[n]                    (one batched matmul; lands in NCHW order)
    backward:  dW      = sum_n dout[n] @ cols[n]^T      [O, K]
               db      = sum over n, oh, ow of dout     [O]
               dcols[n] = W^T @ dout[n]                  [K, P], and dx = col2im(dcols)

The per-sample layout [N, K, P] (rather than one [K, N*P] matrix) lets the output come out
NCHW with no transpose of the large arrays; np.matmul runs it as one BLAS GEMM per sample.
With ``groups`` G, W is [G, O/G, K/G] and cols [N, G, K/G, P]: a matmul batched over samples and
groups. Dilation d spreads the taps (tap (i, j) reads x_pad[.., d*i + s*oh, d*j + s*ow]).

Which one runs. ``conv2d(method="auto")``, the default, picks by shape (``choose_method``; the choice
was measured with ``benchmarks/cnn.py --layers``):

    1x1 kernel, one group (not: a large weight, a small map)  "im2col"     (here: its im2col is the input
                                                                            itself, or a subsample)
    stride 1, no dilation, one group, padding < kernel,       "implicit"   (conv_implicit.py: shifted
      K = C*kh*kw < 1024                                                    products, no im2col copy)
    strided, no dilation, one group, K < 1024, kernel <= 3x3  "polyphase"  (conv_polyphase.py: stride-1
                                                                            convolutions over the phases)
    anything else (K >= 1024, dilation, groups, a 1x1 kernel  "gemm"       (conv_gemm.py: one product over
      on a small map, a strided kernel above 3x3)                           the whole batch)

So every 3x3 layer of ResNet-20 (K = 144 to 576) runs "implicit" (stride 1) or "polyphase" (stride 2),
the deep 3x3 layers of a ResNet-50 run "gemm", and the im2col code above runs by default only for the
1x1 layers, or when asked for (``method="im2col"``). It stays the reference the others are tested
against: tests/test_conv.py checks every method against a direct loop and by gradcheck, and the fast
ones against im2col at ResNet-like sizes in float32 (``test_implicit_and_im2col_agree_float32``);
tests/test_conv_polyphase.py checks polyphase against im2col, tests/test_conv_options.py the options
(dilation, groups, padding) for "im2col", "gemm" and "auto" against a direct loop.
"""

from __future__ import annotations

import numpy as np

from minidl.nn import init
from minidl.nn.conv_gemm import GemmConv2dFunction
from minidl.nn.conv_implicit import ImplicitConv2dFunction
from minidl.nn.conv_polyphase import PolyphaseConv2dFunction
from minidl.nn.im2col import check_conv_args, check_window, col2im, im2col, pair
from minidl.nn.module import Module, Parameter
from minidl.nn.pad import PADDING_MODES, pad2d, same_padding
from minidl.tensor import Function, Tensor, get_default_dtype

METHODS = ("auto", "im2col", "implicit", "gemm", "polyphase")
GEMM_MIN_DEPTH = 1024  # "auto" takes "gemm" when K = C*kh*kw reaches this (measured: benchmarks/cnn.py --layers)
GEMM_MAX_PIXELS_1X1 = 128  # and for a 1x1 kernel whose output has fewer pixels than this (measured, as above)
GEMM_MIN_WEIGHT_1X1 = 2**16  # and whose weight has at least this many entries (ResNet-20's 2,048 keep im2col)


class Conv2dFunction(Function):
    """Fused convolution: inputs (x, weight) or (x, weight, bias); hand-written backward."""

    def forward(self, x, weight, bias=None, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        check_conv_args(x, weight, bias, groups)
        o, cg, kh, kw = weight.shape
        n = x.shape[0]
        oh, ow = check_window(x.shape, (kh, kw), stride, padding, "conv2d", dilation)
        cols = im2col(x, (kh, kw), stride, padding, dilation=dilation).reshape(n, groups, cg * kh * kw, oh * ow)
        out = np.matmul(weight.reshape(groups, o // groups, -1), cols)  # [N, G, O/G, OH*OW]
        if bias is not None:
            out += bias.reshape(groups, o // groups, 1)
        self.save_for_backward(cols, weight)
        self.x_shape, self.conf = x.shape, (stride, padding, dilation, groups)
        return out.reshape(n, o, oh, ow)

    def backward(self, g):
        cols, weight = self.saved_tensors
        stride, padding, dilation, groups = self.conf
        n, o, oh, ow = g.shape
        g = g.reshape(n, groups, o // groups, oh * ow)
        w3 = weight.reshape(groups, o // groups, -1)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dcols = np.matmul(w3.transpose(0, 2, 1), g)  # [N, G, K/G, P]
            _, cg, kh, kw = weight.shape
            dx = col2im(dcols.reshape(n, groups * cg, kh, kw, oh, ow), self.x_shape, stride, padding, dilation)
        if self.needs_input_grad[1]:
            dw = np.matmul(g, cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(weight.shape)
        if len(self.parents) == 3 and self.needs_input_grad[2]:
            db = g.sum(axis=(0, 3)).reshape(o)
        return (dx, dw) if len(self.parents) == 2 else (dx, dw, db)


def choose_method(weight_shape, stride, padding, dilation, groups, out_pixels: int | None = None) -> str:
    """What "auto" runs (measured: ``benchmarks/cnn.py --layers``): "im2col" for 1x1 convolutions (their
    im2col is the input itself, or a subsample) unless their output has fewer than 128 ``out_pixels`` (OH*OW)
    and their weight at least 2**16 entries, "implicit" for stride-1 ones with a shallow K = C*kh*kw,
    "polyphase" for strided ones with a shallow K (ResNet-20's 3x3 stride-2: 12.9 against 17.9 ms by "gemm",
    measured), "gemm" otherwise (deep layers, dilation, groups, and large 1x1 kernels on small maps: there
    im2col's one small product per image reads the
    whole weight N times; ResNet-50's 1x1 512 -> 2048 at 2x2, batch 32: 11.5 against 86 ms, at 7x7, batch 8:
    24 against 36 ms; equal at 14x14; and strided kernels above 3x3: ResNet-50's 7x7 stride-2 stem at 224x224,
    batch 8: 121 against 499 ms by "polyphase")."""
    o, cg, kh, kw = weight_shape
    if kh * kw == 1 and groups == 1:
        small_map = out_pixels is not None and out_pixels < GEMM_MAX_PIXELS_1X1
        return "gemm" if small_map and o * cg >= GEMM_MIN_WEIGHT_1X1 else "im2col"
    if implicit_applies(weight_shape, stride, padding, dilation, groups) and cg * kh * kw < GEMM_MIN_DEPTH:
        return "implicit"
    if dilation == (1, 1) and groups == 1 and cg * kh * kw < GEMM_MIN_DEPTH and kh * kw <= 9:
        return "polyphase"
    return "gemm"


def implicit_applies(weight_shape, stride, padding, dilation, groups) -> bool:
    """The implicit algorithm needs stride 1, dilation 1, one group and padding smaller than the kernel."""
    k = weight_shape[2:]
    return stride == (1, 1) and dilation == (1, 1) and groups == 1 and all(p < kk for p, kk in zip(padding, k))


def conv2d(
    x: Tensor,
    weight: Tensor,
    bias: Tensor | None = None,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, ...] | str = 0,
    dilation: int | tuple[int, int] = 1,
    groups: int = 1,
    *,
    method: str = "auto",
) -> Tensor:
    """x [N, C, H, W], weight [O, C/groups, kh, kw], bias [O] or None -> [N, O, OH, OW] (PyTorch's F.conv2d).

    ``padding``: an int, a pair, 4 ints (left, right, top, bottom, as F.pad's), "valid" (none) or "same"
    (stride 1 only; the output keeps H x W). Negative padding crops (as F.pad with negative widths).
    ``method``: "im2col", "implicit", "gemm", "polyphase" (see the module docstring) or "auto" (choose_method).
    """
    stride, dilation = pair(stride, "stride"), pair(dilation, "dilation")
    if method not in METHODS:
        raise ValueError(f"conv2d: method must be one of {', '.join(map(repr, METHODS))}, got {method!r}")
    if not isinstance(groups, int | np.integer) or groups < 1:
        raise ValueError(f"conv2d: groups must be a positive int, got {groups!r}")
    padding = resolve_padding(padding, weight.shape[2:], stride, dilation)
    if len(padding) == 4:  # uneven or negative: pad (or crop) explicitly, then a convolution without padding
        x, padding = pad2d(x, padding), (0, 0)
    if method == "polyphase" and (dilation != (1, 1) or groups != 1):
        raise ValueError(f"conv2d: the polyphase method needs dilation 1 and groups 1, got {dilation}, {groups}")
    if method == "implicit" and not implicit_applies(weight.shape, stride, padding, dilation, groups):
        raise ValueError(
            f"conv2d: the implicit method needs stride 1, dilation 1, groups 1 and padding < kernel size, got "
            f"stride={stride}, padding={padding}, dilation={dilation}, groups={groups}, kernel {tuple(weight.shape[2:])}"
        )
    if method == "auto":
        try:
            kernel, pads = (weight.shape[2], weight.shape[3]), (padding[0], padding[1])
            oh, ow = check_window(x.shape, kernel, stride, pads, "conv2d", dilation)
        except ValueError:
            oh = ow = 0  # a bad shape: the convolution itself says what is wrong
        method = choose_method(weight.shape, stride, padding, dilation, groups, out_pixels=oh * ow or None)
    if method == "implicit":
        fn, kw = ImplicitConv2dFunction, {"padding": padding}
    elif method == "polyphase":
        fn, kw = PolyphaseConv2dFunction, {"stride": stride, "padding": padding}
    else:
        fn = Conv2dFunction if method == "im2col" else GemmConv2dFunction
        kw = {"stride": stride, "padding": padding, "dilation": dilation, "groups": int(groups)}
    return fn.apply(x, weight, **kw) if bias is None else fn.apply(x, weight, bias, **kw)


def resolve_padding(padding, kernel, stride, dilation) -> tuple[int, ...]:
    """An int, a pair, 4 ints (left, right, top, bottom: F.pad's order), "valid" or "same" -> (ph, pw), or
    (top, bottom, left, right) when the sides differ or one is negative (a negative width crops, as F.pad)."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0)
        if padding != "same":
            raise ValueError(f"conv2d: padding must be an int, a pair, 'valid' or 'same', got {padding!r}")
        if stride != (1, 1):
            raise ValueError(f"conv2d: padding='same' needs stride 1, got stride={stride}")
        top, bottom, left, right = same_padding(tuple(kernel), dilation)
    elif not isinstance(padding, int | np.integer) and len(padding) == 4:
        if not all(isinstance(p, int | np.integer) for p in padding):
            raise ValueError(f"conv2d: padding must be ints, got {padding!r}")
        left, right, top, bottom = (int(p) for p in padding)
    else:
        (top, left), (bottom, right) = pair(padding, "padding"), pair(padding, "padding")
    if (top, left) == (bottom, right) and min(top, left) >= 0:
        return top, left
    return top, bottom, left, right


class Conv2d(Module):
    """Conv2d(in, out, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True, padding_mode="zeros"), NCHW.

    weight [out, in/groups, kh, kw], bias [out]; PyTorch's default init (kaiming_uniform_ a=sqrt(5)).
    ``padding`` may be "same" or "valid"; ``padding_mode`` "zeros" or "reflect" (others raise).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int | tuple[int, int],
        stride: int | tuple[int, int] = 1,
        padding: int | tuple[int, ...] | str = 0,
        dilation: int | tuple[int, int] = 1,
        groups: int = 1,
        bias: bool = True,
        padding_mode: str = "zeros",
        dtype=None,
    ):
        super().__init__()
        if in_channels < 1 or out_channels < 1:
            raise ValueError(f"Conv2d: channels must be >= 1, got in={in_channels}, out={out_channels}")
        if groups < 1 or in_channels % groups or out_channels % groups:
            raise ValueError(f"Conv2d: groups={groups} must divide in={in_channels} and out={out_channels}")
        if padding_mode not in PADDING_MODES:
            raise ValueError(f"not supported: padding_mode={padding_mode!r} (supported: {', '.join(PADDING_MODES)})")
        self.in_channels, self.out_channels, self.groups = in_channels, out_channels, groups
        self.kernel_size = pair(kernel_size, "kernel_size")
        self.stride, self.dilation = pair(stride, "stride"), pair(dilation, "dilation")
        four = not isinstance(padding, str | int | np.integer) and len(padding) == 4
        self.padding = padding if isinstance(padding, str) else tuple(padding) if four else pair(padding, "padding")
        resolve_padding(self.padding, self.kernel_size, self.stride, self.dilation)  # fail early on a bad one
        self.padding_mode = padding_mode
        dtype = dtype or get_default_dtype()
        shape = (out_channels, in_channels // groups, *self.kernel_size)
        self.weight = Parameter(np.empty(shape, dtype=dtype))
        self.bias = Parameter(np.empty(out_channels, dtype=dtype)) if bias else None
        self.reset_parameters()

    def reset_parameters(self) -> None:
        init.default_weight_and_bias_(self.weight, self.bias)

    def forward(self, x: Tensor) -> Tensor:
        padding = self.padding
        if self.padding_mode != "zeros":  # pad by reflection first, then convolve without padding
            pads = resolve_padding(padding, self.kernel_size, self.stride, self.dilation)
            pads = pads if len(pads) == 4 else (pads[0], pads[0], pads[1], pads[1])
            x, padding = pad2d(x, pads, self.padding_mode), 0
        return conv2d(x, self.weight, self.bias, self.stride, padding, self.dilation, self.groups)

    def extra_repr(self) -> str:
        extra = "".join(
            f", {name}={value!r}"
            for name, value, default in (
                ("dilation", self.dilation, (1, 1)),
                ("groups", self.groups, 1),
                ("padding_mode", self.padding_mode, "zeros"),
            )
            if value != default
        )
        return (
            f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, stride={self.stride}, "
            f"padding={self.padding}{extra}, bias={self.bias is not None}"
        )
