"""Images/s of one ResNet training step: minidl vs PyTorch CPU, one thread each.

The model is He et al.'s CIFAR ResNet-20 (3 stages of 3 BasicBlocks, widths 16/32/64, batch norm,
1x1 projection shortcuts), ``minidl.nn.resnet(20)``, on 32x32x3 images; or, with ``--model resnet50``
(resnet18 ... resnet152), torchvision's ImageNet ResNet, ``minidl.models.resnet50()``, at batch 8 on
224x224x3 images (batch 32 with ``--image 64``). PyTorch runs the same architecture (tests/torch_reference.py,
torchvision's module names and shapes, initialized from minidl's state_dict).
A step is what training does:

    forward, F.cross_entropy over [B, 10] logits, backward, SGD(lr=0.1, momentum=0.9).step()

Each framework runs in its own subprocess (so peak RSS is its own) with OMP/OpenBLAS/MKL threads = 1
and ``torch.set_num_threads(1)``. The two alternate for ``--rounds`` rounds (>= 5), each round reporting
its median step time; printed are the median over rounds with their spread (min-max), the ratio of the
medians, the ratio within each round (min-max) and peak RSS.

Both run under the glibc malloc thresholds that ``import minidl`` sets (minidl/tools/memory.py), and PyTorch
runs once more per round under glibc's defaults ("torch-glibc"), as a PyTorch user's process would:
the first ratio compares the frameworks' own work, the second what each gives out of the box.

The header is ``minidl.info``'s (the BLAS kernel, CPU ISA, sgemm GFLOP/s). After the first round's timed steps
minidl's child clocks ``--split`` more steps op by op (benchmarks/op_clock.py): each GEMM-bound piece (a conv
shape, the linear layer) as ms per step, GFLOP/s and a % of the sgemm peak measured in that process, the
GEMM-bound share of the step, and the rest (batch norm and other ops; the optimizer and autograd outside them).

``--layers`` times single convolution layers instead (forward + backward, input and weight gradients),
ResNet-50-shaped (1x1 and 3x3 at 56x56x64, 28x28x128, 14x14x256, 7x7x512) and ResNet-20-shaped, for
each of minidl's algorithms and "auto" beside torch.nn.functional.conv2d, interleaved, in one process, each
with its % of the sgemm peak measured there. ``--model resnet50 --layers`` times every distinct convolution
of that network at the run's batch and image size instead, minidl's "auto" against PyTorch, with the
number of times each occurs in a step and the step's total convolution time for each framework.

    python benchmarks/cnn.py                    # batch 64, both frameworks
    python benchmarks/cnn.py --batch 128 --steps 20
    python benchmarks/cnn.py --quick            # a few small steps (CI smoke run)
    python benchmarks/cnn.py --profile          # minidl only, with a cProfile of the step
    python benchmarks/cnn.py --layers           # per-layer times, every algorithm against PyTorch
    python benchmarks/cnn.py --model resnet50   # torchvision's ResNet-50, batch 8 at 224x224
    python benchmarks/cnn.py --model resnet50 --image 64 --layers   # its convolutions at batch 32, 64x64
    python benchmarks/cnn.py --baseline DIR     # also an earlier minidl checkout (git archive REV | tar -x -C DIR),
                                                # in the same interleaved rounds: before/after in one run
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import numpy as np
from harness import TORCH_GLIBC, peak_rss_mb, report, spawn, time_steps  # sets the BLAS threads to 1
from op_clock import split_report

from minidl.tools.info import print_header

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)


IMAGENET_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")


def _batches(batch: int, n: int, image: int) -> tuple[np.ndarray, np.ndarray]:
    """n batches of random images [B, 3, S, S] and labels (speed does not depend on the values)."""
    rng = np.random.default_rng(0)
    return (rng.standard_normal((n, batch, 3, image, image), dtype=np.float32), rng.integers(0, 10, size=(n, batch)))


def _minidl_model(args):
    import minidl
    from minidl import nn

    minidl.manual_seed(0)
    if args.model in IMAGENET_MODELS:
        return nn.resnet_imagenet(int(args.model[6:]), num_classes=10)
    return nn.resnet(args.depth, num_classes=10)


def _timed(step, warmup: int, steps: int, profile: bool = False) -> tuple[float, float, float]:
    """Median wall-clock and CPU seconds per timed step after ``warmup`` steps, and the last loss; with ``profile``,
    a cProfile of the timed steps goes to stderr."""
    if not profile:
        times, loss = time_steps(step, warmup, steps)
    else:
        import cProfile
        import pstats

        for i in range(warmup):
            step(i)
        prof = cProfile.Profile()
        prof.enable()
        times, loss = time_steps(lambda i: step(warmup + i), 0, steps)
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(25)
    return float(np.median([wall for wall, _ in times])), float(np.median([cpu for _, cpu in times])), loss


def run_minidl(args) -> tuple[float, float, float]:
    import minidl
    import minidl.nn.functional as F
    from minidl import optim

    model = _minidl_model(args)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _batches(args.batch, args.warmup + args.steps, args.image)

    def step(i: int) -> float:
        loss = F.cross_entropy(model(minidl.tensor(xs[i])), ys[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    result = _timed(step, args.warmup, args.steps, args.profile)
    split = split_report(step, args.split) if args.split else []
    return (*result, split)


def run_torch(args) -> tuple[float, float, float]:
    import torch

    sys.path.insert(0, os.path.join(ROOT, "tests"))
    from torch_reference import TorchImageNetResNet, TorchResNet

    torch.set_num_threads(1)
    if args.model in IMAGENET_MODELS:
        model = TorchImageNetResNet(int(args.model[6:]), num_classes=10)
    else:
        model = TorchResNet(args.depth, num_classes=10)
    model.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in _minidl_model(args).state_dict().items()})
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    xs, ys = _batches(args.batch, args.warmup + args.steps, args.image)
    xs, ys = torch.from_numpy(xs), torch.from_numpy(ys)

    def step(i: int) -> float:
        loss = torch.nn.functional.cross_entropy(model(xs[i]), ys[i])
        opt.zero_grad()
        loss.backward()
        opt.step()
        return loss.item()

    return (*_timed(step, args.warmup, args.steps), [])


def _child(args) -> None:
    step_s, cpu_s, loss, split = (run_minidl if args.child == "minidl" else run_torch)(args)
    print(
        json.dumps(
            {
                "impl": args.child,
                "images_per_s": args.batch / step_s,
                "cpu_images_per_s": args.batch / cpu_s,
                "ms_per_step": 1e3 * step_s,
                "loss": loss,
                "peak_rss_mb": peak_rss_mb(),
                "split": split,
            }
        )
    )


def _spawn(impl: str, args, split: int = 0) -> dict | None:
    script = __file__ if impl != "baseline" else os.path.join(args.baseline, "benchmarks", "cnn.py")
    return spawn(
        script,
        [
            "--child",
            {"baseline": "minidl", TORCH_GLIBC: "torch"}.get(impl, impl),
            "--batch",
            str(args.batch),
            "--steps",
            str(args.steps),
            "--warmup",
            str(args.warmup),
            "--depth",
            str(args.depth),
            "--model",
            args.model,
            "--image",
            str(args.image),
        ]
        + (["--profile"] if args.profile else [])
        + (["--split", str(split)] if split else []),
        glibc_defaults=impl == TORCH_GLIBC,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--batch", type=int, help="images per step (64; ImageNet models: 8 at 224, else 32)")
    parser.add_argument("--steps", type=int, default=10, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per framework (medians over them)")
    parser.add_argument("--depth", type=int, default=20, help="ResNet depth, 6n + 2")
    parser.add_argument("--model", choices=("resnet", *IMAGENET_MODELS), default="resnet", help="resnet: --depth's")
    parser.add_argument("--image", type=int, help="image side in pixels (32; ImageNet models: 224)")
    parser.add_argument("--quick", action="store_true", help="batch 8, 2 steps: a smoke run")
    parser.add_argument("--profile", action="store_true", help="cProfile the minidl step (minidl only)")
    parser.add_argument("--layers", action="store_true", help="time single conv layers (ResNet-50 and -20 shapes)")
    parser.add_argument("--baseline", help="an earlier minidl checkout to time in the same rounds (before/after)")
    parser.add_argument("--split", type=int, default=3, help="clocked steps of the op split (first round; 0: none)")
    parser.add_argument("--child", choices=["minidl", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    imagenet = args.model in IMAGENET_MODELS
    args.image = args.image or (224 if imagenet else 32)
    args.batch = args.batch or (64 if not imagenet else 8 if args.image >= 224 else 32)
    if not args.child:
        print_header(quick=args.quick)
    if args.layers:
        from conv_layers import main as layers_main
        from conv_layers import network_layers

        quick = args.quick or os.environ.get("MINIDL_QUICK") == "1"
        if imagenet:
            network_layers(_minidl_model(args), args.batch, args.image, quick=quick, repeats=max(args.rounds, 5))
        else:
            layers_main(quick=quick, repeats=max(args.rounds, 5))
        return
    if args.quick or os.environ.get("MINIDL_QUICK") == "1":
        args.batch, args.steps, args.warmup, args.rounds = min(args.batch, 8), min(args.steps, 2), 1, 1
        args.split = min(args.split, 1)
    if args.child:
        _child(args)
        return
    name = f"ResNet-{args.model[6:]} (torchvision)" if imagenet else f"ResNet-{args.depth}"
    print(
        f"{name} on {args.image}x{args.image}x3, batch {args.batch}, SGD momentum 0.9; "
        f"median of {args.steps} timed steps after {args.warmup} warm-up per round, {args.rounds} interleaved rounds, 1 thread"
    )
    try:
        import torch  # noqa: F401

        impls = ["minidl"] if args.profile else ["minidl", "torch", TORCH_GLIBC]
    except ImportError:
        impls = ["minidl"]
        print("PyTorch not installed: timing minidl only")
    if args.baseline and not args.profile:
        impls.append("baseline")
    rounds: list[dict[str, dict | None]] = []
    for r in range(1 if args.profile else args.rounds):
        rounds.append(
            {name: _spawn(name, args, split=args.split if r == 0 and name == "minidl" else 0) for name in impls}
        )
    print("CPU time (the process's own CPU seconds: the fairer number on a shared machine):")
    report(rounds, impls, "cpu_images_per_s", "images/CPU-s", target=0.8)
    _report_baseline(rounds, "cpu_images_per_s", "images/CPU-s")
    print("wall clock:")
    report(rounds, impls, "images_per_s", "images/s", target=0.8)
    _report_baseline(rounds, "images_per_s", "images/s")
    if rounds[0].get("minidl") and rounds[0]["minidl"]["split"]:
        print(f"minidl's step by op, {args.split} clocked steps after round 1's timed ones:")
        print("\n".join(rounds[0]["minidl"]["split"]))


def _report_baseline(rounds: list[dict[str, dict | None]], key: str, unit: str) -> None:
    """minidl against the --baseline checkout: ratio of the medians and the spread of the per-round ratios;
    and the baseline's own ratio to torch, from the same rounds."""
    import statistics

    pairs = [(r["minidl"][key], r["baseline"][key]) for r in rounds if r.get("minidl") and r.get("baseline")]
    if not pairs:
        return
    ratio = statistics.median(a for a, _ in pairs) / statistics.median(b for _, b in pairs)
    per_round = sorted(a / b for a, b in pairs)
    print(f"  ratio minidl / baseline: {ratio:.2f}x {unit} (per round {per_round[0]:.2f}-{per_round[-1]:.2f}x)")
    both = [(r["baseline"][key], r["torch"][key]) for r in rounds if r.get("baseline") and r.get("torch")]
    if both:
        base = statistics.median(a for a, _ in both) / statistics.median(b for _, b in both)
        print(f"  ratio baseline / torch: {base:.2f}x {unit}")


if __name__ == "__main__":
    main()
