"""Single convolution layers, forward + backward, every minidl algorithm against PyTorch (``cnn.py --layers``).

Layers: ResNet-50's 3x3 convolutions at 56x56x64, 28x28x128, 14x14x256 and 7x7x512 and its 1x1
ones (64 -> 256 and 256 -> 64 at 56x56), at batch 8; ResNet-20's at batch 64. One step is
y = conv(x); y.backward(g) with gradients for the input and the weight. Within each repeat the
candidates run one after another (interleaved), each timed in CPU seconds of this thread (load from
other processes on a shared machine inflates wall time, not this); printed are the median over the
repeats with the spread (min-max) in ms, each one's ratio to PyTorch, its rate (3 products of 2 N O C k^2 OH OW
flops) as a % of the sgemm peak measured in the same process at the start, and the process's peak RSS.

``network_layers(model, batch, image)`` (``cnn.py --model resnet50 --layers``) takes the layers from a network
instead: every distinct convolution its forward pass meets, with how many times it occurs, minidl's "auto"
against PyTorch, and the step's convolution time for each (each layer's time times its count, summed).
"""

from __future__ import annotations

import statistics
import time

import numpy as np
from harness import median_spread, peak_rss_mb

import minidl
import minidl.nn.functional as F
from minidl.tools.info import SGEMM_N, SGEMM_QUICK_N, sgemm_gflops

LAYERS = [  # (name, N, C, H=W, O, k, stride, padding)
    ("R50 3x3 56x56x64", 8, 64, 56, 64, 3, 1, 1),
    ("R50 3x3 28x28x128", 8, 128, 28, 128, 3, 1, 1),
    ("R50 3x3 14x14x256", 8, 256, 14, 256, 3, 1, 1),
    ("R50 3x3 7x7x512", 8, 512, 7, 512, 3, 1, 1),
    ("R50 1x1 56x56 64->256", 8, 64, 56, 256, 1, 1, 0),
    ("R50 1x1 56x56 256->64", 8, 256, 56, 64, 1, 1, 0),
    ("R20 3x3 32x32x16", 64, 16, 32, 16, 3, 1, 1),
    ("R20 3x3 16x16x32", 64, 32, 16, 32, 3, 1, 1),
    ("R20 3x3 8x8x64", 64, 64, 8, 64, 3, 1, 1),
    ("R20 3x3 s2 32->16x16x32", 64, 16, 32, 32, 3, 2, 1),
    ("R20 3x3 s2 16->8x8x64", 64, 32, 16, 64, 3, 2, 1),
]


def _minidl_step(x, w, g, stride, padding, method):
    def step():
        xt, wt = minidl.tensor(x, requires_grad=True), minidl.tensor(w, requires_grad=True)
        F.conv2d(xt, wt, None, stride, padding, method=method).backward(g)

    return step


def _torch_step(x, w, g, stride, padding):
    import torch

    xt, wt, gt = (torch.from_numpy(a.copy()) for a in (x, w, g))

    def step():
        xr, wr = xt.detach().requires_grad_(), wt.detach().requires_grad_()
        torch.nn.functional.conv2d(xr, wr, None, stride, padding).backward(gt)

    return step


def _candidates(layer, rng):
    _, n, c, s, o, k, stride, padding = layer
    x = rng.standard_normal((n, c, s, s), dtype=np.float32)
    w = (rng.standard_normal((o, c, k, k)) / np.sqrt(c * k * k)).astype(np.float32)
    oh = (s + 2 * padding - k) // stride + 1
    g = rng.standard_normal((n, o, oh, oh), dtype=np.float32)
    methods = ["auto", "im2col", "gemm", "polyphase"] + (["implicit"] if stride == 1 else [])
    cands = {m: _minidl_step(x, w, g, stride, padding, m) for m in methods}
    try:
        import torch

        torch.set_num_threads(1)
        cands["torch"] = _torch_step(x, w, g, stride, padding)
    except ImportError:
        pass
    return cands


def layer_flops(layer: tuple) -> float:
    """Flops of one step of ``layer``: forward, dx and dW are each 2 * N * O * C * k^2 * OH * OW."""
    _, n, c, s, o, k, stride, padding = layer
    oh = (s + 2 * padding - k) // stride + 1
    return 3 * 2.0 * n * o * c * k * k * oh * oh


def conv_shapes(model, image: int, batch: int) -> dict[tuple, int]:
    """The distinct convolutions of ``model``'s forward pass on ``[batch, C, image, image]`` as ``layers`` rows
    (name, N, C, H=W, O, k, stride, padding), each with the number of times it occurs."""
    from minidl import nn

    seen: dict[tuple, int] = {}
    convs = [m for m in model.modules() if isinstance(m, nn.Conv2d)]

    def recording(conv):
        forward = conv.forward

        def record(x):
            _, c, h, _ = x.shape
            (k, _), (stride, _), (padding, _) = conv.kernel_size, conv.stride, conv.padding
            oh = (h + 2 * padding - k) // stride + 1
            name = f"{k}x{k}{' s2' if stride == 2 else ''} {h}x{h}x{c}->{oh}x{oh}x{conv.out_channels}"
            row = (name, batch, c, h, conv.out_channels, k, stride, padding)
            seen[row] = seen.get(row, 0) + 1
            return forward(x)

        return record

    for conv in convs:
        conv.forward = recording(conv)
    with minidl.no_grad():
        model(minidl.zeros(1, convs[0].in_channels, image, image))
    for conv in convs:
        del conv.forward  # the class's forward again
    return seen


def network_layers(model, batch: int, image: int, quick: bool = False, repeats: int = 5) -> None:
    """Every distinct convolution of ``model`` at ``batch`` x ``image`` pixels: minidl's "auto" against torch."""
    rng = np.random.default_rng(0)
    shapes = conv_shapes(model, image, batch)
    repeats = 1 if quick else repeats
    peak = sgemm_gflops(SGEMM_QUICK_N if quick else SGEMM_N)
    print(f"the network's convolutions at batch {batch}, {image}x{image}: forward + backward (dx, dW), float32,")
    print(
        f"1 thread; median (min-max) ms of {repeats} repeats, ratio torch / minidl, % of sgemm peak {peak:.1f} GFLOP/s"
    )
    totals: dict[str, float] = {}
    for layer, count in shapes.items():
        cands = {m: step for m, step in _candidates(layer, rng).items() if m in ("auto", "torch")}
        times = interleaved(cands, repeats)
        cells = []
        for m, ts in times.items():
            totals[m] = totals.get(m, 0.0) + count * statistics.median(ts)
            pct = 100 * layer_flops(layer) / (1e-3 * statistics.median(ts)) / 1e9 / peak
            cells.append(f"{m} {median_spread(ts)} {pct:.0f}%")
        ratio = (
            f" | {statistics.median(times['torch']) / statistics.median(times['auto']):.2f}x"
            if "torch" in times
            else ""
        )
        print(f"{layer[0]:>30} x{count:<2}: " + " | ".join(cells) + ratio)
    line = " | ".join(f"{m} {t:,.0f} ms" for m, t in totals.items())
    ratio = f" ({totals['torch'] / totals['auto']:.2f}x)" if "torch" in totals else ""
    print(f"{'all convolutions of a step':>34}: {line}{ratio}; peak RSS {peak_rss_mb():,.0f} MB")


def interleaved(cands: dict, repeats: int) -> dict[str, list[float]]:
    """Each candidate's thread-CPU ms per call, one warm-up each, then the candidates in turn ``repeats`` times."""
    for step in cands.values():
        step()  # warm-up
    times: dict[str, list[float]] = {m: [] for m in cands}
    for _ in range(repeats):
        for m, step in cands.items():
            t0 = time.thread_time()
            step()
            times[m].append(1e3 * (time.thread_time() - t0))
    return times


def main(quick: bool = False, repeats: int = 5) -> None:
    rng = np.random.default_rng(0)
    layers = LAYERS[:1] + LAYERS[6:7] if quick else LAYERS
    repeats = 1 if quick else repeats
    peak = sgemm_gflops(SGEMM_QUICK_N if quick else SGEMM_N)
    print(f"conv layers, forward + backward (dx, dW), float32, 1 thread; median (min-max) ms of {repeats} repeats;")
    print(f"each with its ratio to torch and its % of the sgemm peak measured here, {peak:.1f} GFLOP/s")
    for layer in layers:
        cands = _candidates(layer, rng)
        times = interleaved(cands, repeats)
        ref = statistics.median(times["torch"]) if "torch" in times else None
        cells = []
        for m, ts in times.items():
            ratio = f" {ref / statistics.median(ts):.2f}x" if ref and m != "torch" else ""
            pct = 100 * layer_flops(layer) / (1e-3 * statistics.median(ts)) / 1e9 / peak
            cells.append(f"{m} {median_spread(ts)}{ratio} {pct:.0f}%")
        print(f"{layer[0]:>24}: " + " | ".join(cells))
    print(f"peak RSS {peak_rss_mb():,.0f} MB (one process; ratios are torch time / minidl time, > 1 is faster)")
