"""F.cross_entropy forward + backward on [N, C] float32 logits: fused minidl vs composed minidl vs PyTorch.

The LSTM language model's decoder ends in softmax cross-entropy over [T*B, vocab] = [400, 10000] logits;
every step pays for it. The fused op (minidl/ops/loss.py) makes one [N, C] buffer, exp(x - max), in the
forward and scales it into the gradient in the backward. The composed version (log_softmax, then
indexing, then mean) is the obvious program; PyTorch is the yardstick. One thread each; best of ``--repeats``.

    python benchmarks/cross_entropy.py [--n 400] [--c 10000] [--repeats 20]
"""

from __future__ import annotations

import argparse
import os
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import numpy as np  # noqa: E402

import minidl  # noqa: E402
import minidl.nn.functional as F  # noqa: E402


def best_ms(fn, repeats: int) -> float:
    fn()  # warm up
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return 1e3 * min(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=400)
    ap.add_argument("--c", type=int, default=10000)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
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

    results = {
        "minidl fused": best_ms(fused, args.repeats),
        "minidl composed": best_ms(composed, args.repeats),
        "minidl x*w only (floor)": best_ms(scale_only, args.repeats),
    }
    try:
        import torch

        torch.set_num_threads(1)
        xt, tt = torch.tensor(x), torch.tensor(t)
        wt = torch.ones((1, 1), requires_grad=True)

        def torch_ce():
            torch.nn.functional.cross_entropy(xt * wt, tt).backward()

        results["torch"] = best_ms(torch_ce, args.repeats)
    except ImportError:
        pass
    print(f"cross-entropy forward+backward, logits [{args.n}, {args.c}] float32, best of {args.repeats}")
    base = results["minidl fused"]
    for name, ms in results.items():
        print(f"  {name:26s} {ms:8.2f} ms   ({ms / base:.2f}x fused)")


if __name__ == "__main__":
    main()
