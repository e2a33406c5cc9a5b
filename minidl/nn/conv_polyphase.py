"""Strided convolution as a sum of stride-1 ones over the input's phases (polyphase decomposition).

With stride (sh, sw), kernel tap (i, j) of output (oh, ow) reads x_pad[sh*oh + i, sw*ow + j]. Split
x_pad into its sh*sw phases P_ab = x_pad[a::sh, b::sw] (a < sh, b < sw); then

    x_pad[sh*oh + i, sw*ow + j] = P_ab[oh + di, ow + dj]     with a = i % sh, di = i // sh, b = j % sw, dj = j // sw,

so  out[:, oh, ow] = sum_{i, j} W[:, :, i, j] @ P_{ab(i, j)}[:, oh + di, ow + dj]:  every tap is a stride-1
shifted product, as in conv_implicit.py. Each phase is stored flat with rows of R = ceil(Wp / sw) values
(the widest phase; narrower ones end in a zero), so tap (i, j) reads the contiguous slice of its phase
from di*R + dj on, and the output is computed on the grid q = oh*R + ow, keeping ow < OW (R - OW <= 1 of
every R columns are waste at a 3x3 stride-2 convolution, against 9x the input copied by im2col).

    forward:   outf = sum_{i, j} W_ij @ F_ab(i,j)[:, di*R + dj : di*R + dj + OH*R]                 [O, OH*R]
    dW_ij      = sum_n gf[n] @ F_ab[n, :, di*R + dj : ...]^T       (gf: g on the [OH, R] grid, 0 past OW)
    dx:        dP_ab[:, u, v] = sum_{taps of phase ab} W_ij^T @ g[:, u - di, v - dj]   (0 outside g)
               computed on the [H0, R] grid from g stored flat with DI = max di zero rows above and
               DJ = max dj zero columns before each row of R (OW + DJ <= R, so a row's reads never reach
               the next one's values): tap (i, j) reads from (DI - di)*R + (DJ - dj) on. Then
               dx_pad[a::sh, b::sw] = dP_ab and dx = dx_pad without its padding.

Stride 1 is the one-phase case (conv_implicit.py, which also shares padding columns, is its faster twin).
"""

from __future__ import annotations

import numpy as np

from minidl.nn.conv_implicit import batch_terms, tap_sum, window_weight_grads
from minidl.nn.im2col import check_conv_args, check_window, pad2d
from minidl.tensor import Function


def phases(xp: np.ndarray, stride, row: int, rows: int) -> dict[tuple[int, int], np.ndarray]:
    """x_pad [N, C, Hp, Wp] -> {(a, b): F_ab [N, C, rows*row]}, F_ab[.., u*row + v] = x_pad[.., sh*u + a, sw*v + b]
    (zeros past the phase's own height and width)."""
    n, c = xp.shape[:2]
    (sh, sw) = stride
    out = {}
    for a in range(sh):
        for b in range(sw):
            p = xp[:, :, a::sh, b::sw]
            f = np.zeros((n, c, rows, row), dtype=xp.dtype)
            f[:, :, : p.shape[2], : p.shape[3]] = p
            out[a, b] = f.reshape(n, c, rows * row)
    return out


class PolyphaseConv2dFunction(Function):
    """x [N, C, H, W], weight [O, C, kh, kw] (+ bias [O]) -> [N, O, OH, OW]; any stride and padding, no
    dilation or groups."""

    def forward(self, x, weight, bias=None, *, stride=(1, 1), padding=(0, 0)):
        check_conv_args(x, weight, bias)
        kh, kw = weight.shape[2:]
        oh, ow = check_window(x.shape, (kh, kw), stride, padding, "conv2d")
        (sh, sw), (ph, pw) = stride, padding
        hp, wp = x.shape[2] + 2 * ph, x.shape[3] + 2 * pw
        row, rows = -(-wp // sw), -(-hp // sh) + 1  # one spare zero row: the last taps' slices run past the end
        f = phases(pad2d(x, padding), stride, row, rows)
        taps = np.ascontiguousarray(weight.transpose(2, 3, 0, 1))  # [kh, kw, O, C]: BLAS-ready (conv_implicit.py)
        terms = [(taps[i, j], f[i % sh, j % sw], (i // sh) * row + j // sw) for i in range(kh) for j in range(kw)]
        out = tap_sum(batch_terms(terms), len(x), weight.shape[0], x.dtype, row, oh, ow)
        if bias is not None:
            out += bias[:, None, None]
        self.save_for_backward(weight, *f.values())
        self.keys, self.x_shape, self.conf = list(f), x.shape, (stride, padding, row, rows)
        return out

    def backward(self, g):
        weight, *fs = self.saved_tensors
        f = dict(zip(self.keys, fs))
        (sh, sw), (ph, pw), row, rows = self.conf
        n, o, oh, ow = g.shape
        _, c, kh, kw = weight.shape
        h, w = self.x_shape[2:]
        taps = [(i, j) for i in range(kh) for j in range(kw)]
        di_max, dj_max = (kh - 1) // sh, (kw - 1) // sw
        # g on the [rows, row] grid, DI zero rows above it and DJ zero columns before each row (docstring)
        gp = np.zeros((n, o, rows + di_max + 1, row), dtype=g.dtype)
        gp[:, :, di_max : di_max + oh, dj_max : dj_max + ow] = g
        gp = gp.reshape(n, o, -1)
        dx = dw = db = None
        if self.needs_input_grad[0]:
            dxp = np.zeros((n, c, h + 2 * ph, w + 2 * pw), dtype=g.dtype)
            taps_t = np.ascontiguousarray(weight.transpose(2, 3, 1, 0))  # [kh, kw, C, O]
            for a, b in f:
                terms = [
                    (taps_t[i, j], gp, (di_max - i // sh) * row + dj_max - j // sw)
                    for i, j in taps
                    if (i % sh, j % sw) == (a, b)
                ]
                if terms:
                    target = dxp[:, :, a::sh, b::sw]
                    hb, wb = target.shape[2:]
                    target[...] = tap_sum(batch_terms(terms), n, c, g.dtype, row, hb, wb)
            dx = dxp[:, :, ph : ph + h, pw : pw + w] if ph or pw else dxp
        if self.needs_input_grad[1]:
            start = di_max * row + dj_max  # g's first pixel; the zeros after each row of OW are the dropped columns
            gf = gp[:, :, start : start + oh * row]
            windows = [(f[i % sh, j % sw], (i // sh) * row + j // sw) for i, j in taps]  # tap -> (phase, offset)
            dw = window_weight_grads(gf, windows, c)
            dw = np.ascontiguousarray(dw.reshape(kh, kw, o, c).transpose(2, 3, 0, 1))
        if len(self.parents) == 3 and self.needs_input_grad[2]:
            db = g.sum(axis=(0, 2, 3))
        return (dx, dw) if len(self.parents) == 2 else (dx, dw, db)
