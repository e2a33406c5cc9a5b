"""F.cross_entropy forward + backward on [N, C] float32 logits: fused minidl vs composed minidl vs PyTorch.

The LSTM language model's decoder ends in softmax cross-entropy over [T*B, vocab] = [400, 10000] logits;
every step pays for it. The fused op (minidl/ops/loss.py) makes one [N, C] buffer, exp(x - max), in the
forward and scales it into the gradient in the backward. The composed version (log_softmax, then
indexing, then mean) is the obvious program; PyTorch is the yardstick. One thread each; the median of ``--repeats``
interleaved rounds with the min-max spread, and the peak memory.

    python benchmarks/cross_entropy.py [--n 400] [--c 10000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402
from minidl.tools.measure import busy_note, interleaved, peak_rss_mb, seconds, spread  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--c", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=15)
    args = ap.parse_args()
    print_header()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((args.n, args.c)).astype(np.float32)
    t = rng.integers(0, args.c, args.n)
    rows = np.arange(args.n)
    w = minidl.Tensor(np.ones((1, 1), np.float32), requires_grad=True)  # makes the logits a non-leaf, as in a model

    def fused():
        F.cross_entropy(minidl.Tensor(x) * w, t).backward()

    def composed():
        (-((minidl.Tensor(x) * w).log_softmax(axis=1)[rows, t]).mean()).backward()

    def scale_only():  # the floor: the x * w multiply and its backward, shared by both
        ((minidl.Tensor(x) * w).sum()).backward()

    configs = {
        "minidl fused": seconds(fused),
        "minidl composed": seconds(composed),
        "minidl x*w only (floor)": seconds(scale_only),
    }
    try:
        import torch

        torch.set_num_threads(1)
        xt, tt = torch.tensor(x), torch.tensor(t)
        wt = torch.ones((1, 1), requires_grad=True)

        def torch_ce():
            torch.nn.functional.cross_entropy(xt * wt, tt).backward()

        configs["torch"] = seconds(torch_ce)
    except ImportError:
        print("(PyTorch not installed: `make torch` adds it as the comparison)")
    for measure in configs.values():
        measure()  # warm up
    samples = interleaved(configs, args.repeats)
    print(f"cross-entropy forward+backward, logits [{args.n}, {args.c}] float32, median of {args.repeats} interleaved")
    base = spread(samples["minidl fused"])[0]
    for name, values in samples.items():
        med, lo, hi = spread(values)
        print(f"  {name:26s} {1e3 * med:8.2f} ms ({1e3 * lo:.2f}-{1e3 * hi:.2f})   ({med / base:.2f}x fused)")
    print(f"{busy_note(samples)}; peak memory {peak_rss_mb():.0f} MB (this process, both frameworks)")


if __name__ == "__main__":
    main()
