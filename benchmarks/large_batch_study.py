"""The large-batch study of tutorial 09 and ``benchmarks/large_batch.py``: the CNN task's ResNet on the generated
images, trained for a fixed number of epochs at a global batch B, on one process.

A global batch of B = P ranks x b images x A accumulated passes is computed as gradient accumulation: the B images
are cut into micro-batches of ``micro`` images, each micro-batch's mean loss is scaled by micro / B and
backpropagated, so the summed gradient is the mean over the B images: the very gradient that P ranks' allreduce
(or ``DistributedOptimizer(backward_passes_per_step=A)``) produces, whatever P x A is. Batch norm normalizes each
micro-batch as a rank would its own b images (its running statistics are updated per micro-batch).

Three recipes (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017; You, Gitman &
Ginsburg, "Large Batch Training of Convolutional Networks" (LARS), 2017):

- ``sgd``: momentum SGD at the rate tuned for the base batch, whatever B is;
- ``linear``: the rate times B / base, ramped up linearly from the base rate over ``warmup_epochs``;
- ``lars``: LARS (layer-wise trust ratio; biases and norm parameters excluded) with the same scaling and warmup.

Each then decays its rate along a cosine to 0 at the last step (the CNN task's schedule).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.images import ImageSet
from minidl.optim.large_batch import warmup_ramp

RECIPES = ("sgd", "linear", "lars")


@dataclass(frozen=True)
class Setting:
    """What one run trains: the recipe, the global batch, the schedule and the network."""

    recipe: str = "sgd"
    global_batch: int = 64
    micro: int = 64  # images per backward pass: a rank's batch
    epochs: int = 4
    base_batch: int = 64  # the batch ``lr`` is tuned for
    lr: float = 0.1
    lars_lr: float = 2.0  # LARS's base rate (trust coefficient 0.001)
    warmup_epochs: float = 1.0
    width: int = 4
    norm: str = "batch"  # "batch": per micro-batch (per rank); "ghost2": per 2 images inside it
    seed: int = 0


def network(s: Setting, data: ImageSet) -> nn.Module:
    """ResNet-8 of width ``s.width``; batch norm per micro-batch, or ghost batch norm over 2 images."""
    norm = nn.BatchNorm2d if s.norm == "batch" else (lambda c: nn.GhostBatchNorm2d(c, 2))
    return nn.resnet(8, len(data.classes), data.x_train.shape[1], s.width, norm=norm)


def make_optimizer(s: Setting, net: nn.Module) -> optim.Optimizer:
    if s.recipe == "lars":
        return optim.LARS(optim.exclude_bias_and_norm(net.parameters()), lr=s.lars_lr, momentum=0.9, weight_decay=5e-4)
    return optim.SGD(net.parameters(), lr=s.lr, momentum=0.9, weight_decay=5e-4)


def rate(s: Setting, step: int, steps: int, per_epoch: int) -> float:
    """The learning rate of ``step`` of ``steps``: scaled and warmed up (``linear``, ``lars``), cosine-decayed."""
    base = s.lars_lr if s.recipe == "lars" else s.lr
    k = s.global_batch / s.base_batch if s.recipe != "sgd" else 1.0
    ramp = warmup_ramp(step, round(s.warmup_epochs * per_epoch), k) if k > 1.0 else 1.0  # from the base rate
    return k * base * ramp * (1.0 + math.cos(math.pi * step / steps)) / 2.0


def train(s: Setting, data: ImageSet) -> dict[str, Any]:
    """Train per ``s``; returns per-label test accuracy, the last training loss, steps and the setting."""
    if s.recipe not in RECIPES:
        raise ValueError(f"unknown recipe {s.recipe!r}; choose from {RECIPES}")
    if s.global_batch % s.micro or s.global_batch > len(data.x_train):
        raise ValueError(f"global batch {s.global_batch}: must be a multiple of {s.micro} and <= the training set")
    minidl.manual_seed(s.seed)
    net, rng = network(s, data), np.random.default_rng(s.seed)
    opt = make_optimizer(s, net)
    per_epoch = len(data.x_train) // s.global_batch
    steps, step, loss = s.epochs * per_epoch, 0, float("nan")
    for _ in range(s.epochs):
        order = rng.permutation(len(data.x_train))
        for b in range(per_epoch):
            for group in opt.param_groups:
                group["lr"] = rate(s, step, steps, per_epoch)
            loss = accumulate(net, data, order[b * s.global_batch : (b + 1) * s.global_batch], s.micro)
            opt.step()
            opt.zero_grad()
            step += 1
    return {"accuracy": accuracy(net, data), "train_loss": loss, "steps": steps, "setting": s}


def accumulate(net: nn.Module, data: ImageSet, idx: np.ndarray, micro: int) -> float:
    """Backpropagate the mean loss over ``idx`` in micro-batches; returns that mean loss."""
    total = 0.0
    for m in range(0, len(idx), micro):
        part = idx[m : m + micro]
        x = minidl.tensor(data.x_train[part])
        loss = F.binary_cross_entropy_with_logits(net(x), minidl.tensor(data.y_train[part].astype(np.float32)))
        (loss * (len(part) / len(idx))).backward()
        total += float(loss.data) * len(part) / len(idx)
    return total


def accuracy(net: nn.Module, data: ImageSet, batch: int = 500) -> float:
    """Per-label accuracy on the test split: the fraction of the N x K yes/no decisions (logit > 0) that are right."""
    net.eval()
    right = 0.0
    with minidl.no_grad():
        for s in range(0, len(data.x_test), batch):
            logits = net(minidl.tensor(data.x_test[s : s + batch])).data
            right += float(((logits > 0) == (data.y_test[s : s + batch] > 0.5)).sum())
    net.train()
    return right / data.y_test.size


def images(n_train: int, n_test: int = 1000, size: int = 16, seed: int = 0) -> ImageSet:
    """The generated multi-label shapes at ``size`` x ``size`` (16: four times cheaper than the CNN task's 32)."""
    from minidl.data.images import generated_images

    return generated_images("quick", seed=seed, n_train=n_train, n_test=n_test, size=size)


def sweep(data: ImageSet, batches: list[int], recipes: tuple[str, ...] = RECIPES, **common: Any) -> list[dict]:
    """Final accuracy of every recipe at every global batch (micro-batches of min(64, B) images)."""
    return [
        train(Setting(recipe=r, global_batch=b, micro=min(64, b), **common), data) for b in batches for r in recipes
    ]


def norm_study(data: ImageSet, ranks: int = 16, per_rank: int = 2, **common: Any) -> dict[str, dict]:
    """Batch norm at ``per_rank`` images on each of ``ranks`` ranks: statistics per rank (ghost batch norm over
    ``per_rank`` images of the global batch: the same normalization, one process) against SyncBatchNorm (one
    batch norm over the whole global batch: the statistics SyncBatchNorm's allreduce computes)."""
    if per_rank != 2:
        raise ValueError("norm_study: the per-rank ghost batch norm here is over 2 images")
    b = ranks * per_rank
    return {
        "per rank": train(Setting(global_batch=b, micro=b, norm="ghost2", **common), data),
        "SyncBatchNorm": train(Setting(global_batch=b, micro=b, norm="batch", **common), data),
    }
