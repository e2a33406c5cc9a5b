"""Stride-1 convolution as "implicit im2col": the im2col matmul split into kh*kw matmuls over views.

The im2col product out = W[O, C*kh*kw] @ cols splits along its inner dimension into one product per
kernel tap (i, j):

    out = sum_{i, j} W[:, :, i, j] @ cols[:, i, j]          (W[:, :, i, j] is [O, C])

With stride 1, and the padded image stored flat, each tap's block cols[:, i, j] needs no copy at all.
Store x_pad row by row with rows of R = W + pw values: the W pixels, then pw zeros, which serve as the
right padding of their row and the left padding of the next (a window reaching pw columns past either
edge lands in them). Row t of x_pad (t in [0, H + 2ph); ph zero rows above and below x), column c
(c in [-pw, W + pw)) is at flat position t*R + c + pw of xf [C, L]. Compute the output at the flat
positions q = oh*R + ow for ow in [0, R) rather than [0, OW); then the input under tap (i, j) is

    x_pad[c, oh + i, ow + j - pw] = xf[c, q + i*R + j],

a contiguous slice of xf shifted by i*R + j. So

    outf[:, q] = sum_{i, j} W[:, :, i, j] @ xf[:, q + i*R + j]      for q in [0, OH*R)

and the columns ow >= OW (OW = W + 2pw - kw + 1 <= R, as pw < kw) are dropped: kw - 1 - pw of every
R computed columns are waste (one in R at a 3x3 "same" convolution: 8 of 72 at 8x8, against 16 of 80
when each row stores both its paddings). The work is the same
matmuls as im2col, without writing and reading the kh*kw times larger cols array; memory traffic is
what bounds convolutions with few channels, so this is ~2x faster on CPU. The backward passes are the
same idea:

    dx = the same sum over g padded by (kh-1-ph, kw-1-pw) with the flipped, transposed kernel
         (a stride-1 convolution's input gradient is the "full" correlation with the flipped kernel);
         g's flat rows are OW + kw-1-pw = W + pw = R long, the forward's row length
    dW[:, :, i, j] = sum_n gf[n] @ xf[n, :, i*R + j : ...]^T
         (gf: g on the forward's output grid, 0 in the dropped columns: exactly the padded g of dx,
         from its first pixel on, so a slice of it)
"""

from __future__ import annotations

import numpy as np

from minidl.nn.im2col import check_conv_args, check_window
from minidl.tensor import Function


def flat_pad(x: np.ndarray, padding: tuple[int, int], kw: int) -> np.ndarray:
    """x [N, C, H, W] zero-padded and flattened to [N, C, (H + 2ph)*R + kw - 1], rows of R = W + pw.

    Row t of the padded image, column c in [-pw, W + pw), is at t*R + c + pw (module docstring); the
    last kw - 1 zeros let the last row's shifted slices run past the end (they feed dropped columns).
    """
    n, c, h, w = x.shape
    ph, pw = padding
    hp, row = h + 2 * ph, w + pw
    xf = np.zeros((n, c, hp * row + kw - 1), dtype=x.dtype)
    xf[:, :, pw : pw + hp * row].reshape(n, c, hp, row)[:, :, ph : ph + h, :w] = x
    return xf


CHUNK_BYTES = 1 << 18  # per-chunk output block: with its twin temporary it stays in a core's L2 cache
ROW_CHUNK_BYTES = 1 << 20  # shifted_matmuls' chunk: output block and the kw shifted copies (measured best, 1 MiB L2)


def chunk_size(n: int, per_sample_bytes: int, budget: int = CHUNK_BYTES) -> int:
    """Samples per chunk so that one chunk's blocks take about ``budget`` bytes (at least 1 sample)."""
    return max(1, min(n, budget // max(per_sample_bytes, 1)))


def tap_sum(
    terms_for, n: int, o: int, dtype, row: int, rows: int, width: int, extra_bytes: int = 0, budget: int = CHUNK_BYTES
):
    """For each chunk of m samples from s0: the sum over (w [O, K], src [m, K, L], s) in ``terms_for(s0, m)`` of
    w @ src[:, :, s : s + rows*row], cropped to ``width`` columns per row -> [N, O, rows, width] (contiguous).

    The batch goes in chunks of a few samples so that the accumulations ``acc += tmp`` run in cache (a
    core's L2) rather than as passes through memory (2x faster at 32x32x16, measured), and each chunk's
    crop (dropping the row - width wrapped-around columns) is copied out of cache into the result: no
    full-size temporary. ``extra_bytes``: per sample, what ``terms_for`` itself builds for a chunk (counted
    in the chunk's ``budget``). Each matrix handed to np.matmul must be contiguous in its last axis, so that
    BLAS gets it as is (a strided view such as weight[:, :, i, j] sends np.matmul to its own, slower loop).
    """
    length = rows * row
    out = np.empty((n, o, rows, width), dtype=dtype)
    nb = chunk_size(n, o * length * np.dtype(dtype).itemsize + extra_bytes, budget)
    acc, tmp = np.empty((nb, o, length), dtype=dtype), np.empty((nb, o, length), dtype=dtype)
    for s0 in range(0, n, nb):
        m = min(nb, n - s0)
        ac, tc = acc[:m], tmp[:m]
        for k, (w, src, s) in enumerate(terms_for(s0, m)):
            if k == 0:
                np.matmul(w, src[:, :, s : s + length], out=ac)
            else:
                np.matmul(w, src[:, :, s : s + length], out=tc)
                ac += tc
        out[s0 : s0 + m] = ac.reshape(m, o, rows, row)[:, :, :, :width]
    return out


def batch_terms(terms: list[tuple[np.ndarray, np.ndarray, int]]):
    """``tap_sum``'s terms_for when the sources are whole-batch arrays: each (w, src, s), src cut to the chunk."""
    return lambda s0, m: [(w, src[s0 : s0 + m], s) for w, src, s in terms]


def shifted_matmuls(xf: np.ndarray, taps: np.ndarray, row: int, rows: int, width: int) -> np.ndarray:
    """sum over taps (i, j) of taps[i, j] @ xf[:, :, i*row + j : i*row + j + rows*row], cropped to ``width``
    columns per row: -> [N, O, rows, width] (contiguous).

    xf [N, C, L] flat padded input with row length ``row``; taps [kh, kw, O, C]. One product per kernel
    row rather than per tap: the kw taps of row i side by side are one [O, kw*C] matrix, and the input
    they multiply is kw shifted copies of xf stacked along the channels, made chunk by chunk in cache,

        xs[:, j*C + c, q] = xf[:, c, q + j]      (j < kw),      so
        out[:, :, q] = sum_i taps_row[i] @ xs[:, :, q + i*row]  (a row-shifted view of xs, no copy)

    kh products with an inner dimension of kw*C instead of kh*kw with C: BLAS runs the wider product
    faster (C = 16 is far below its blocking), and kh - 1 accumulations remain of kh*kw - 1. Measured at
    batch 64, 3x3 taps: 4.9 -> 4.4 ms at 32x32x16, 4.0 -> 3.7 at 16x16x32, 3.8 -> 3.7 at 8x8x64 against
    one product per tap (``tap_sum`` over the taps themselves).
    """
    kh, kw, o, c = taps.shape
    rowtaps = np.ascontiguousarray(taps.transpose(0, 2, 1, 3).reshape(kh, o, kw * c))  # [kh, O, kw*C]
    n, span = xf.shape[0], (rows + kh - 1) * row  # the columns of xs that row-shifted views read
    nb = chunk_size(n, (o * rows * row + kw * c * span) * xf.itemsize, ROW_CHUNK_BYTES)
    shifted = np.empty((nb, kw, c, span), dtype=xf.dtype)

    def row_terms(s0: int, m: int):
        xs = shifted[:m]
        for j in range(kw):
            xs[:, j] = xf[s0 : s0 + m, :, j : j + span]
        xs = xs.reshape(m, kw * c, span)
        return [(rowtaps[i], xs, i * row) for i in range(kh)]

    return tap_sum(row_terms, n, o, xf.dtype, row, rows, width, kw * c * span * xf.itemsize, ROW_CHUNK_BYTES)


NN_MIN_CHANNELS = 64  # add_weight_grads transposes g's chunk from this many output channels on (measured)


def add_weight_grads(dw: np.ndarray, gc: np.ndarray, windows) -> None:
    """dw[t] += sum_n gc[n] @ window_t[n]^T  for dw [T, O, C], gc [nb, O, L] and T windows [nb, C, L] (an iterable).

    A weight gradient's two operands both have the summed pixel axis L contiguous, so each product is
    "A @ B^T", which OpenBLAS runs at 63 against 94 GFLOPS for a plain "A @ B" at [64, 72] @ [72, 64] in
    cache (measured). From O >= NN_MIN_CHANNELS the chunk of g is copied once to gt [nb, L, O] and each tap
    computes the transpose, dw[t]^T += sum_n window_t[n] @ gt[n], a plain product: ResNet-20's 3x3 weight
    gradients at 8x8 with 64 output channels take 3.7 against 5.5-6.4 ms (C = 64) and 1.9 against 2.9 ms
    (C = 32), 64 images, measured; with 16 or 32 output channels the copy costs more than it saves.
    """
    if gc.shape[1] >= NN_MIN_CHANNELS:
        gt = np.ascontiguousarray(gc.transpose(0, 2, 1))
        for t, window in enumerate(windows):
            dw[t] += np.matmul(window, gt).sum(axis=0).T
    else:
        for t, window in enumerate(windows):
            dw[t] += np.matmul(gc, window.transpose(0, 2, 1)).sum(axis=0)


def window_weight_grads(gf: np.ndarray, windows: list[tuple[np.ndarray, int]], c: int) -> np.ndarray:
    """dw[t] = sum_n gf[n] @ src_t[n, :, s_t : s_t + L]^T for the T windows (src_t [N, C, *], s_t) -> [T, O, C],
    gf [N, O, L]. Chunked over the batch, so each chunk of gf is read from cache by all windows."""
    n, o, length = gf.shape
    dw = np.zeros((len(windows), o, c), dtype=gf.dtype)
    nb = chunk_size(n, (o + c) * length * gf.itemsize, 4 * CHUNK_BYTES)  # gf's and x's blocks, ~1 MiB (measured)
    for s0 in range(0, n, nb):
        add_weight_grads(dw, gf[s0 : s0 + nb], (src[s0 : s0 + nb, :, s : s + length] for src, s in windows))
    return dw


def shifted_weight_grad(gf: np.ndarray, xf: np.ndarray, kh: int, kw: int, row: int) -> np.ndarray:
    """dW[:, :, i, j] = sum_n gf[n] @ xf[n, :, i*row + j : i*row + j + L]^T  for gf [N, O, L] -> [O, C, kh, kw]."""
    dw = window_weight_grads(gf, [(xf, i * row + j) for i in range(kh) for j in range(kw)], xf.shape[1])
    return dw.reshape(kh, kw, *dw.shape[1:]).transpose(2, 3, 0, 1)


class ImplicitConv2dFunction(Function):
    """Stride-1 convolution of x [N, C, H, W] with weight [O, C, kh, kw] (+ bias [O]), padding < kernel."""

    def forward(self, x, weight, bias=None, *, padding=(0, 0)):
        check_conv_args(x, weight, bias)
        (kh, kw), (ph, pw) = weight.shape[2:], padding
        oh, ow = check_window(x.shape, (kh, kw), (1, 1), padding, "conv2d")
        if ph >= kh or pw >= kw:
            raise ValueError(f"conv2d (implicit): padding {padding} must be smaller than the kernel {(kh, kw)}")
        xf = flat_pad(x, padding, kw)
        taps = np.ascontiguousarray(weight.transpose(2, 3, 0, 1))  # [kh, kw, O, C]: each tap BLAS-ready (below)
        out = shifted_matmuls(xf, taps, x.shape[3] + pw, oh, ow)  # [N, O, OH, OW]
        if bias is not None:
            out += bias[:, None, None]
        self.save_for_backward(xf, weight)
        self.x_shape, self.padding = x.shape, padding
        return out

    def backward(self, g):
        xf, weight = self.saved_tensors
        n, o, oh, ow = g.shape
        _, c, kh, kw = weight.shape
        h, w = self.x_shape[2:]
        ph, pw = self.padding
        dx = dw = db = None
        full = (kh - 1 - ph, kw - 1 - pw)
        gp = flat_pad(g, full, kw)  # rows of ow + full[1] = w + pw values, the forward's row length
        row = w + pw
        if self.needs_input_grad[0]:
            flipped = np.ascontiguousarray(weight[:, :, ::-1, ::-1].transpose(2, 3, 1, 0))  # [kh, kw, C, O]
            dx = shifted_matmuls(gp, flipped, row, h, w)
        if self.needs_input_grad[1]:
            start = full[0] * row + full[1]  # g's first pixel; the zeros after each row are the dropped columns
            gf = gp[:, :, start : start + oh * row]
            dw = np.ascontiguousarray(shifted_weight_grad(gf, xf, kh, kw, row))
        if len(self.parents) == 3 and self.needs_input_grad[2]:
            db = g.sum(axis=(0, 2, 3))
        return (dx, dw) if len(self.parents) == 2 else (dx, dw, db)
