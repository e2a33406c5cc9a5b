"""Final accuracy against the global batch, 64 to 8192, for plain SGD, SGD with linear scaling and warmup, and LARS;
and batch norm at 2 images per rank with and without SyncBatchNorm.

Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017 (linear scaling, warmup); You,
Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", 2017 (LARS); Hoffer et al., "Train longer,
generalize better", 2017 (ghost batch norm). The network is the CNN task's ResNet-8 (width 4) on the generated
multi-label shapes at 16 x 16; every run sees the same number of images (a fixed epoch budget), so a larger batch
takes fewer, larger steps. A global batch B = ranks x images per rank x accumulated passes is computed on one process
by gradient accumulation over micro-batches of 64 (``large_batch_study.py`` beside this file: the same summed
gradient as P ranks' allreduce; batch norm per micro-batch, as per rank). One seed per setting (``--seeds`` for
more: the median and the spread are printed); peak memory is the process's maximum resident set.

    python benchmarks/large_batch.py [--quick] [--batches 64,512,4096,8192] [--epochs 4] [--train 8192]
"""

from __future__ import annotations

import argparse
import os
import resource
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
from large_batch_study import RECIPES, images, norm_study, sweep  # noqa: E402

from minidl.tools.info import print_header  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    quick = "--quick" in sys.argv or os.environ.get("MINIDL_QUICK") == "1"
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--batches", default="64,512" if quick else "64,512,4096,8192")
    parser.add_argument("--epochs", type=int, default=2 if quick else 4)
    parser.add_argument("--train", type=int, default=1024 if quick else 8192, help="training images")
    parser.add_argument("--seeds", type=int, default=1)
    args = parser.parse_args()
    print_header(quick=args.quick)
    data, batches = images(args.train), [int(b) for b in args.batches.split(",")]
    started = time.perf_counter()
    runs = [sweep(data, batches, epochs=args.epochs, seed=s) for s in range(args.seeds)]
    print(
        f"ResNet-8 width 4, {args.train} images 16x16, {args.epochs} epochs, {args.seeds} seed(s): test per-label accuracy %"
    )
    print(f"{'global batch':>12} {'steps':>6} " + " ".join(f"{r:>16}" for r in RECIPES))
    for i, b in enumerate(batches):
        cells = []
        for j, _ in enumerate(RECIPES):
            acc = np.array([100 * run[i * len(RECIPES) + j]["accuracy"] for run in runs])
            cells.append(f"{np.median(acc):7.2f} +- {(acc.max() - acc.min()) / 2:5.2f}")
        print(f"{b:>12} {runs[0][i * len(RECIPES)]['steps']:>6} " + " ".join(f"{c:>16}" for c in cells))
    norms = norm_study(data, epochs=args.epochs)
    print("batch norm at 2 images per rank, 16 ranks (global batch 32): test per-label accuracy %")
    for name, r in norms.items():
        print(f"  {name:>14}: {100 * r['accuracy']:.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"{time.perf_counter() - started:.0f} s in all; peak memory {peak:.0f} MiB")


if __name__ == "__main__":
    main()
