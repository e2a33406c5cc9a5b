"""Convolution as one large matrix product over the whole batch: im2col with channels first across the batch.

The per-sample im2col of conv.py runs N products [O, K] @ [K, P] (K = C*kh*kw, P = OH*OW); when P is
small (deep layers: 14x14, 7x7) each is a small matrix product that BLAS runs far below its peak.
Laying the columns out channels first across the batch,

    cols[(c, i, j), (n, oh, ow)] = x_pad[n, c, d*i + s*oh, d*j + s*ow]          [K, N*P]

turns the batch into the columns of ONE product per pass:

    forward:   out2  = W2 @ cols          W2 = W as [O, K];  out2 [O, N*P] -> NCHW by one transpose copy
    backward:  dW2   = g2 @ cols^T        g2 = g as [O, N*P] (one transpose copy)
               dcols = W2^T @ g2,         dx = col2im(dcols) (the adjoint of the copy above)

With ``groups`` G the channels split into G blocks of C/G inputs and O/G outputs; block g's rows of cols
are a contiguous slice, so the three products become G-batched matmuls ([G, O/G, K/G] @ [G, K/G, N*P]),
depthwise convolution (G = C) included. Stride, padding and dilation only change which pixels the
copy reads. Memory: cols is K*N*P elements, the same as the per-sample im2col's, kept for backward.
"""

from __future__ import annotations

import numpy as np

from minidl.nn.im2col import check_conv_args, check_window, pad2d
from minidl.tensor import Function


def batch_im2col(x: np.ndarray, kernel, stride, padding, dilation) -> np.ndarray:
    """x [N, C, H, W] -> cols [C, kh, kw, N, OH, OW] (see the module docstring)."""
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    oh, ow = check_window(x.shape, kernel, stride, padding, "conv2d", dilation)
    xp = pad2d(x, padding).transpose(1, 0, 2, 3)  # [C, N, Hp, Wp], a view
    cols = np.empty((x.shape[1], kh, kw, x.shape[0], oh, ow), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            cols[:, i, j] = xp[:, :, dh * i : dh * i + sh * oh : sh, dw * j : dw * j + sw * ow : sw]
    return cols


def batch_col2im(cols: np.ndarray, x_shape, stride, padding, dilation) -> np.ndarray:
    """The adjoint of batch_im2col: cols [C, kh, kw, N, OH, OW] -> x [N, C, H, W], summing overlaps."""
    c, kh, kw, n, oh, ow = cols.shape
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    h, w = x_shape[2:]
    xp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=cols.dtype)
    xt = xp.transpose(1, 0, 2, 3)  # [C, N, Hp, Wp] view: the adds land in NCHW memory directly
    for i in range(kh):
        for j in range(kw):
            xt[:, :, dh * i : dh * i + sh * oh : sh, dw * j : dw * j + sw * ow : sw] += cols[:, i, j]
    return xp[:, :, ph : ph + h, pw : pw + w] if ph or pw else xp


class GemmConv2dFunction(Function):
    """x [N, C, H, W], weight [O, C/G, kh, kw] (+ bias [O]) -> [N, O, OH, OW]; any stride, padding, dilation, groups."""

    def forward(self, x, weight, bias=None, *, stride=(1, 1), padding=(0, 0), dilation=(1, 1), groups=1):
        check_conv_args(x, weight, bias, groups)
        o, cg, kh, kw = weight.shape
        n = x.shape[0]
        cols = batch_im2col(x, (kh, kw), stride, padding, dilation)
        oh, ow = cols.shape[4:]
        cols = cols.reshape(groups, cg * kh * kw, n * oh * ow)
        out = np.matmul(weight.reshape(groups, o // groups, -1), cols).reshape(o, n, oh, ow)
        out = out.transpose(1, 0, 2, 3)
        out = out + bias[:, None, None] if bias is not None else np.ascontiguousarray(out)
        self.save_for_backward(cols, weight)
        self.x_shape, self.conf = x.shape, (stride, padding, dilation, groups)
        return out

    def backward(self, g):
        cols, weight = self.saved_tensors
        stride, padding, dilation, groups = self.conf
        n, o, oh, ow = g.shape
        _, cg, kh, kw = weight.shape
        g3 = np.ascontiguousarray(g.transpose(1, 0, 2, 3)).reshape(groups, o // groups, n * oh * ow)
        w3 = weight.reshape(groups, o // groups, -1)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dcols = np.matmul(w3.transpose(0, 2, 1), g3).reshape(groups * cg, kh, kw, n, oh, ow)
            dx = batch_col2im(dcols, self.x_shape, stride, padding, dilation)
        if self.needs_input_grad[1]:
            dw = np.matmul(g3, cols.transpose(0, 2, 1)).reshape(weight.shape)
        if len(self.parents) == 3 and self.needs_input_grad[2]:
            db = g3.sum(axis=2).reshape(o)
        return (dx, dw) if len(self.parents) == 2 else (dx, dw, db)
