"""``python -m minidl.train cnn``: train a ResNet on images.

    python -m minidl.train cnn                                   # generated multi-label shapes, --preset demo
    python -m minidl.train cnn --depth 20 --width 16 --epochs 10 # ResNet-20 as in He et al. (2016)
    python -m minidl.train cnn --data ~/mnist                    # MNIST / Fashion-MNIST IDX files
    mpiexec -n 2 python -m minidl.train cnn --parallel data --allreduce ring --sync-bn
    python -m minidl.train cnn --model resnet50 --image 64       # torchvision's ResNet-50, preset imagenet

Two tasks, one program:

- **multi-label** (the default: ``minidl.data.images``, a stand-in for multi-label chest X-rays as in
  Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure", The Next Platform, 2018): each image
  contains any subset of K shapes; the network has K outputs, one independent yes/no each, trained with
  ``F.binary_cross_entropy_with_logits`` and scored by per-label accuracy (the fraction of the N*K
  decisions ``logit > 0`` that are right) and exact-match accuracy.
- **single-label** (``--data DIR`` with IDX files): 10 classes, ``F.cross_entropy``, accuracy.

SGD with momentum and weight decay, a linear warmup then a cosine decay of the learning rate per step.
Under ``--parallel data`` each global batch of P*b shuffled examples is split across the ranks (b each);
batch norm normalizes each rank's own b examples unless ``--sync-bn`` (statistics over all P*b).
"""

from __future__ import annotations

import argparse
import itertools
import math
from collections.abc import Iterator
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.idx import mnist_images
from minidl.data.images import ImageSet, generated_images
from minidl.models.resnet import CNN_PRESETS, IMAGENET_MODELS, CNNConfig
from minidl.nn.norm import running_stats_frozen
from minidl.train import cli
from minidl.train.loop import Task

PRESETS = CNN_PRESETS
OVERRIDES = {
    f: f for f in ("depth", "width", "batch_size", "lr", "epochs", "momentum", "weight_decay", "model", "image")
}


def load_images(args: argparse.Namespace, cfg: CNNConfig) -> ImageSet:
    """``--data DIR``: MNIST-format IDX files (10 classes), else the preset's generated multi-label shapes
    (``cfg.image`` pixels a side where set)."""
    if args.data:
        return mnist_images(args.data)
    return generated_images(cfg.images, seed=0, **({"size": cfg.image} if cfg.image else {}))


def image_size(text: str) -> int:
    """``--image``: a side of at least 32 pixels (torchvision's ResNets reach 1x1 at their last stage)."""
    size = cli.positive_int(text)
    if size < 32:
        raise argparse.ArgumentTypeError(f"must be at least 32 pixels, got {size}")
    return size


def correct(multilabel: bool, logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example right answers: [n, K] booleans (multi-label: logit > 0 iff the label is 1), else [n, 1]."""
    return (logits > 0) == (y > 0.5) if multilabel else (logits.argmax(axis=1) == y)[:, None]


class CNNTask(Task):
    """Train a ResNet on images (generated multi-label shapes, or MNIST-format IDX files)."""

    name, unit, modes = "cnn", "images", ("data", "zero", "model", "tensor", "ps", "local-sgd")
    PRESETS, OVERRIDES, lines_per_epoch, epoch_split, evaluates_last_epoch = PRESETS, OVERRIDES, 5, "test", False
    tally_width, history_keys, split_softmax = 3, ("loss", "accuracy"), False
    MODEL_FIELDS = ("depth", "width")

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        parser.add_argument("--data", metavar="DIR", help="a directory of IDX files (MNIST / Fashion-MNIST format)")
        model = parser.add_argument_group("network and schedule (override the preset)")
        model.add_argument(
            "--model",
            choices=("resnet", *IMAGENET_MODELS),
            help="resnet: the CIFAR ResNet of --depth and --width (default); resnet18 ... resnet152: torchvision's",
        )
        model.add_argument("--image", type=image_size, metavar="PIXELS", help="generated images' side (32; >= 32)")
        model.add_argument("--depth", type=cli.positive_int, help="ResNet depth, 6n + 2 (8, 14, 20, 32, ...)")
        model.add_argument("--width", type=cli.positive_int, help="channels of the first stage (16 in He et al.)")
        model.add_argument("--momentum", type=float)
        model.add_argument("--weight-decay", type=float)
        model.add_argument("--sync-bn", action="store_true", help="batch statistics over all ranks (SyncBatchNorm)")
        model.add_argument("--eval-batch-size", type=cli.positive_int, default=250)

    def __init__(self, args: argparse.Namespace, cfg: CNNConfig, preset: str):
        self.args, self.cfg, self.data = args, cfg, load_images(args, cfg)
        self.classes, self.multilabel = self.data.classes, self.data.multilabel

    def prepare(self, shard: tuple[int, int]) -> int:
        n, (rank, size) = self.data.x_train.shape[0], shard
        self.sampler = dist.DistributedSampler(n, self.cfg.batch_size, seed=self.args.seed, rank=rank, size=size)
        return len(self.sampler)

    def steps_per_epoch(self, global_batch: int) -> int:
        """Steps per epoch of a run whose ranks together take ``global_batch`` examples (the sampler drops the rest)."""
        return self.data.x_train.shape[0] // global_batch

    @staticmethod
    def default_preset(args: argparse.Namespace, quick: bool) -> str:
        """torchvision's ResNets (``--model resnet50``) get the imagenet presets: bigger images, fewer epochs."""
        imagenet = getattr(args, "model", None) in IMAGENET_MODELS
        return ("imagenet-quick" if imagenet else "quick") if quick else ("imagenet" if imagenet else "demo")

    def model(self) -> nn.Module:
        c, classes, channels = self.cfg, len(self.classes), self.data.x_train.shape[1]
        if c.model in IMAGENET_MODELS:
            return nn.resnet_imagenet(int(c.model[6:]), classes, channels, zero_init_residual=True)  # Goyal et al.
        return nn.resnet(c.depth, classes, channels, c.width)

    def size_flags(self) -> str:
        if self.cfg.model in IMAGENET_MODELS:
            return f"--model {self.cfg.model}, --image {self.data.x_train.shape[-1]}"
        return f"--depth {self.cfg.depth}, --width {self.cfg.width}"

    def optimizer(self, params: list) -> optim.Optimizer:
        return optim.SGD(params, lr=self.cfg.lr, momentum=self.cfg.momentum, weight_decay=self.cfg.weight_decay)

    def warmup(self, per_epoch: int) -> int:
        return max(1, min(int(self.cfg.warmup_epochs * per_epoch), self.cfg.epochs * per_epoch - 1))

    def lr(self, step: int, per_epoch: int) -> float:
        """Linear warmup from lr/10 (Goyal et al. 2017), then a cosine decay to 0 at the last epoch's end."""
        warmup, span = self.warmup(per_epoch), max(self.cfg.epochs * per_epoch - self.warmup(per_epoch), 1)
        if step < warmup:
            return self.cfg.lr * (0.1 + 0.9 * step / warmup)
        return self.cfg.lr * (1.0 + math.cos(math.pi * min(step - warmup, span) / span)) / 2.0

    def batches(self, epoch: int, start: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        self.sampler.set_epoch(epoch - 1)
        return ((self.data.x_train[i], self.data.y_train[i]) for i in itertools.islice(self.sampler, start, None))

    def forward(self, net: Any, batch: tuple, again: bool = False, start: bool = True) -> Any:
        with running_stats_frozen(net, frozen=not start):  # one running-statistics update per step, from pass 0
            out = net(minidl.tensor(batch[0].astype(minidl.get_default_dtype(), copy=False)))
        self.logits = out.data if start else np.concatenate([self.logits, out.data])  # the step's, for tally
        return out

    def criterion(self, out: Any, batch: tuple) -> Any:
        y = batch[1]
        return (
            F.binary_cross_entropy_with_logits(out, y.astype(out.dtype)) if self.multilabel else F.cross_entropy(out, y)
        )

    def items(self, batch: tuple) -> int:
        return len(batch[1])

    def tally(self, loss: float, batch: tuple) -> np.ndarray:
        n = len(batch[1])
        return np.array([loss * n, correct(self.multilabel, self.logits, batch[1]).mean() * n, n])

    def train_record(self, sums: np.ndarray) -> dict[str, float]:
        return {"loss": float(sums[0] / max(sums[2], 1)), "accuracy": float(sums[1] / max(sums[2], 1))}

    def progress_text(self, r: dict[str, Any], pos: Any, spe: int) -> str:
        head = f"epoch {pos.epoch} step {pos.window}/{spe} | lr {r['lr']:.3g}"
        return f"{head} | loss {r['loss']:.4f} | train acc {100 * r['accuracy']:.1f}%"

    def evaluate(self, strategy: Any, split: str) -> dict[str, Any]:
        """Accuracy on the test split; each rank scores its contiguous share, the counts are summed."""
        (x, y), (r, p), size = (self.data.x_test, self.data.y_test), strategy.eval_share, self.args.eval_batch_size
        n = x.shape[0]
        sums = np.zeros((len(self.classes) if self.multilabel else 1) + 2)  # right per label, exact, loss
        strategy.net.eval()
        with minidl.no_grad():
            for s in range(n * r // p, n * (r + 1) // p, size):
                e = min(s + size, n * (r + 1) // p)
                out, loss = strategy.eval_loss(self, (x[s:e], y[s:e]))
                if loss is not None and strategy.reports:
                    ok = correct(self.multilabel, out.data, y[s:e])
                    sums += np.concatenate([ok.sum(axis=0), [ok.all(axis=1).sum(), float(loss.data) * (e - s)]])
        strategy.net.train()
        totals = strategy.ctx.sum(sums) / n
        per_label, exact, loss = totals[:-2], float(totals[-2]), float(totals[-1])
        scores = {"accuracy": float(per_label.mean()), "per_label": per_label, "exact": exact, "loss": loss}
        return scores | {"multilabel": self.multilabel}

    def eval_text(self, split: str, r: dict[str, Any]) -> tuple[float, str]:
        """The number the history keeps, and the text of an evaluation."""
        if not self.multilabel:
            return r["accuracy"], f"{split} accuracy {100 * r['accuracy']:.2f}% | loss {r['loss']:.4f}"
        labels = " ".join(f"{c} {100 * a:.1f}" for c, a in zip(self.classes, r["per_label"]))
        text = f"{split} per-label accuracy {100 * r['accuracy']:.2f}% ({labels}) | exact match {100 * r['exact']:.1f}%"
        return r["accuracy"], f"{text} | loss {r['loss']:.4f}"

    def score_line(self, result: dict[str, Any]) -> str:
        return self.eval_text("test", result)[1]

    def header(self, preset: str, n_params: int, spe: int, max_steps: int | None) -> tuple[str, list[str]]:
        c, d, a = self.cfg, self.data, self.args
        kind = "multi-label, BCE with logits" if self.multilabel else "single-label, cross-entropy"
        sync = ", SyncBatchNorm" if a.sync_bn and a.parallel == "data" else ""
        net = (
            f"ResNet-{c.model[6:]} (torchvision)"
            if c.model in IMAGENET_MODELS
            else f"ResNet-{c.depth} (width {c.width})"
        )
        return f"{net}, preset {preset!r}: {n_params:,} parameters ({a.dtype})", [
            f"data: {d.name}: train {d.x_train.shape}, test {d.x_test.shape}, {len(self.classes)} outputs ({kind})",
            f"batch {c.batch_size}/rank, {spe} steps/epoch, {c.epochs} epochs; SGD lr {c.lr * self.lr_scale:g} momentum {c.momentum} "
            f"wd {c.weight_decay}, warmup {self.warmup(spe)} steps then cosine{sync}"
            + (f", at most {max_steps} steps" if max_steps else ""),
        ]


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``cnn``), train, and return the run's numbers and final parameters."""
    return cli.run(CNNTask, argv)
