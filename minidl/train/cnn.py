"""``python -m minidl.train cnn``: train a ResNet on images.

    python -m minidl.train cnn                                   # generated multi-label shapes, --preset demo
    python -m minidl.train cnn --depth 20 --width 16 --epochs 10 # ResNet-20 as in He et al. (2016)
    python -m minidl.train cnn --data ~/mnist                    # MNIST / Fashion-MNIST IDX files
    mpiexec -n 2 python -m minidl.train cnn --parallel data --allreduce ring --sync-bn

Two tasks, one program:

- **multi-label** (the default: ``minidl.data.images``, a stand-in for multi-label chest X-rays as in
  Hemsoth, The Next Platform, 2018): each image contains any subset of K shapes; the network has K outputs, one independent
  yes/no each, trained with ``F.binary_cross_entropy_with_logits`` and scored by per-label accuracy
  (the fraction of the N*K decisions ``logit > 0`` that are right) and exact-match accuracy.
- **single-label** (``--data DIR`` with IDX files): 10 classes, ``F.cross_entropy``, accuracy.

SGD with momentum and weight decay, a linear warmup then a cosine decay of the learning rate per step.
Data parallel: each global batch of P*b shuffled examples is split across the ranks (b each); batch
norm normalizes each rank's own b examples unless ``--sync-bn`` (statistics over all P*b).
"""

from __future__ import annotations

import argparse
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.idx import load_mnist
from minidl.data.images import generated_images
from minidl.train import common
from minidl.train.common import Context


@dataclass(frozen=True)
class CNNConfig:
    """A ResNet (depth = 6n + 2, base width w) and its training schedule."""

    depth: int
    width: int
    batch_size: int  # per rank
    lr: float
    momentum: float
    weight_decay: float
    epochs: int
    warmup_epochs: float
    images: str = "default"  # minidl.data.images.IMAGE_CONFIGS entry for the generated set

    def with_(self, **changes) -> CNNConfig:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


PRESETS: dict[str, CNNConfig] = {
    # >= 95% per-label accuracy on the generated images in a few minutes on one core.
    "demo": CNNConfig(
        depth=8, width=8, batch_size=32, lr=0.1, momentum=0.9, weight_decay=5e-4, epochs=3, warmup_epochs=0.2
    ),
    # He et al.'s ResNet-20 (CIFAR-10 settings, batch 128 -> 64 per rank here).
    "resnet20": CNNConfig(
        depth=20, width=16, batch_size=64, lr=0.1, momentum=0.9, weight_decay=1e-4, epochs=10, warmup_epochs=1.0
    ),
    # Seconds: tests and the tutorials' --quick mode.
    "quick": CNNConfig(
        depth=8,
        width=8,
        batch_size=16,
        lr=0.1,
        momentum=0.9,
        weight_decay=5e-4,
        epochs=5,
        warmup_epochs=0.2,
        images="quick",
    ),
}
OVERRIDES = {
    "depth": "depth",
    "width": "width",
    "batch_size": "batch_size",
    "lr": "lr",
    "epochs": "epochs",
    "momentum": "momentum",
    "weight_decay": "weight_decay",
}


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m minidl.train cnn", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--preset",
        choices=sorted(PRESETS),
        default=None,
        help="network and schedule (default: demo; quick with --quick)",
    )
    parser.add_argument("--data", metavar="DIR", help="a directory of IDX files (MNIST / Fashion-MNIST format)")
    model = parser.add_argument_group("network and schedule (override the preset)")
    model.add_argument("--depth", type=common.positive_int, help="ResNet depth, 6n + 2 (8, 14, 20, 32, ...)")
    model.add_argument("--width", type=common.positive_int, help="channels of the first stage (16 in He et al.)")
    model.add_argument("--momentum", type=float)
    model.add_argument("--weight-decay", type=float)
    model.add_argument("--sync-bn", action="store_true", help="batch statistics over all ranks (SyncBatchNorm)")
    model.add_argument("--eval-batch-size", type=common.positive_int, default=250)
    common.add_common_arguments(parser, modes=("none", "data", "model", "tensor", "ps", "local-sgd"))
    from minidl.train.schemes import add_arguments as add_scheme_arguments  # (schemes imports this module)

    add_scheme_arguments(parser)
    return parser


@dataclass
class Task:
    """Images [N, C, H, W] float, targets, and how outputs are scored."""

    name: str
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    multilabel: bool

    @property
    def num_outputs(self) -> int:
        return len(self.classes)


def load_task(args: argparse.Namespace, cfg: CNNConfig) -> Task:
    if args.data:
        (x_train, y_train), (x_test, y_test) = load_mnist(args.data, "train"), load_mnist(args.data, "t10k")
        # uint8 [N, 28, 28] -> float [N, 1, 28, 28] scaled to [0, 1], labels int64
        prep = lambda x: (np.asarray(x, np.float32) / 255.0)[:, None]
        return Task(
            f"IDX files in {args.data}",
            prep(x_train),
            np.asarray(y_train, np.int64),
            prep(x_test),
            np.asarray(y_test, np.int64),
            tuple(str(c) for c in range(int(y_train.max()) + 1)),
            False,
        )
    data = generated_images(cfg.images, seed=0)
    return Task(
        f"generated multi-label shapes ({cfg.images})",
        data.x_train,
        data.y_train,
        data.x_test,
        data.y_test,
        data.classes,
        True,
    )


def loss_fn(task: Task, logits: minidl.Tensor, y: np.ndarray) -> minidl.Tensor:
    if task.multilabel:
        return F.binary_cross_entropy_with_logits(logits, y.astype(logits.dtype))
    return F.cross_entropy(logits, y)


def correct(task: Task, logits: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-example right answers: [n, K] booleans (multi-label: logit > 0 iff the label is 1), else [n, 1]."""
    if task.multilabel:
        return (logits > 0) == (y > 0.5)
    return (logits.argmax(axis=1) == y)[:, None]


def evaluate(ctx: Context, model: nn.Module, task: Task, batch_size: int) -> dict[str, Any]:
    """Accuracy on the test split; each rank scores a contiguous share, the counts are summed."""
    n = task.x_test.shape[0]
    lo, hi = n * ctx.rank // ctx.size, n * (ctx.rank + 1) // ctx.size
    model.eval()
    right = np.zeros(task.num_outputs if task.multilabel else 1)
    exact, loss = 0.0, 0.0
    with minidl.no_grad():
        for start in range(lo, hi, batch_size):
            x, y = task.x_test[start : min(start + batch_size, hi)], task.y_test[start : min(start + batch_size, hi)]
            logits = model(minidl.tensor(x.astype(minidl.get_default_dtype())))
            loss += float(loss_fn(task, logits, y).data) * len(x)
            ok = correct(task, logits.data, y)
            right += ok.sum(axis=0)
            exact += ok.all(axis=1).sum()
    model.train()
    totals = ctx.sum([*right, exact, loss])
    per_label = totals[: right.size] / n
    return {
        "accuracy": float(per_label.mean()),
        "per_label": per_label,
        "exact": float(totals[right.size] / n),
        "loss": float(totals[-1] / n),
    }


def describe(task: Task, result: dict[str, Any]) -> str:
    if task.multilabel:
        labels = " ".join(f"{c} {100 * a:.1f}" for c, a in zip(task.classes, result["per_label"]))
        return (
            f"per-label accuracy {100 * result['accuracy']:.2f}% ({labels}) | exact match "
            f"{100 * result['exact']:.1f}% | loss {result['loss']:.4f}"
        )
    return f"accuracy {100 * result['accuracy']:.2f}% | loss {result['loss']:.4f}"


def train(ctx: Context, args: argparse.Namespace, preset: str, cfg: CNNConfig) -> dict[str, Any]:
    program = common.split_program(ctx.mode, "cnn")  # model, tensor, ps, local-sgd
    if program is not None:
        return program(ctx, args, preset, cfg)
    task = load_task(args, cfg)
    dtype = minidl.get_default_dtype()
    n_train = task.x_train.shape[0]
    sampler = dist.DistributedSampler(n_train, cfg.batch_size, seed=args.seed, rank=ctx.rank, size=ctx.size)
    steps_per_epoch = len(sampler)

    model = nn.resnet(cfg.depth, task.num_outputs, task.x_train.shape[1], cfg.width)
    if args.sync_bn and ctx.parallel:
        model = dist.convert_sync_batchnorm(model, args.allreduce, ctx.comm)
    common.start_replicas(ctx, model, args.seed)
    params = list(model.parameters())
    opt = common.wrap_optimizer(
        ctx, optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay), args
    )
    # The schedule spans all epochs; --max-steps only stops early (so a stopped-and-resumed run is the same run).
    schedule_steps = cfg.epochs * steps_per_epoch
    total_steps = min(args.max_steps or schedule_steps, schedule_steps)
    warmup = max(1, min(int(cfg.warmup_epochs * steps_per_epoch), schedule_steps - 1))
    schedule = optim.lr_scheduler.warmup_cosine(opt, warmup, max(schedule_steps, warmup + 1))

    step = 0
    position_units = {"global_batch": ctx.size * cfg.batch_size}  # what the sampler's position counts in
    if args.resume:
        saved, _ = common.load_checkpoint(ctx, args.resume, model, opt, schedule, preset, position_units)
        step = int(saved["step"])
        sampler.load_state_dict(saved["sampler"])
    else:
        sampler.set_epoch(0)
    n_params = sum(p.data.size for p in params)
    kind = "multi-label, BCE with logits" if task.multilabel else "single-label, cross-entropy"
    common.print_header(
        ctx,
        f"ResNet-{cfg.depth} (width {cfg.width}), preset {preset!r}: {n_params:,} parameters ({args.dtype})",
        [
            f"data: {task.name}: train {task.x_train.shape}, test {task.x_test.shape}, {task.num_outputs} outputs ({kind})",
            f"batch {cfg.batch_size}/rank, {steps_per_epoch} steps/epoch, {cfg.epochs} epochs; SGD lr {cfg.lr} momentum "
            f"{cfg.momentum} wd {cfg.weight_decay}, warmup {warmup} steps then cosine"
            + (", SyncBatchNorm" if args.sync_bn and ctx.parallel else "")
            + (f", at most {total_steps} steps" if args.max_steps else ""),
        ]
        + ([f"resumed from {args.resume}: epoch {sampler.epoch + 1}, step {step}"] if args.resume else []),
    )

    log_every = args.log_every or max(1, steps_per_epoch // 5)
    speed = common.Throughput("images", ctx.size, args.baseline_wps)
    split = common.TimingWindow(opt)
    started = time.perf_counter()
    loss_sum, right, seen = 0.0, 0.0, 0
    saved_at = step if args.resume else -1
    history: dict[str, list] = {"train": [], "test": []}  # (step, loss, train accuracy), (epoch, test accuracy)

    def checkpoint() -> None:
        nonlocal saved_at
        saved_at = step
        common.save_checkpoint(
            ctx,
            args.save,
            model,
            opt,
            {"step": step, "sampler": sampler.state_dict(), "preset": preset, "settings": position_units},
            {},
            schedule,
        )

    while step < total_steps:
        epoch = sampler.epoch
        for idx in sampler:
            x, y = task.x_train[idx], task.y_train[idx]
            logits = model(minidl.tensor(x.astype(dtype, copy=False)))
            loss = loss_fn(task, logits, y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            schedule.step()
            step += 1
            ok = correct(task, logits.data, y)
            loss_sum += float(loss.data) * len(idx)
            right, seen = right + ok.mean() * len(idx), seen + len(idx)
            speed.add(len(idx))
            if step % log_every == 0 or step == total_steps:
                rate = speed.take()
                tot_loss, tot_right, tot_seen = ctx.sum([loss_sum, right, seen])
                ctx.log(
                    f"epoch {epoch + 1} step {sampler.position}/{steps_per_epoch} | "
                    f"lr {opt.param_groups[0]['lr']:.3g} | loss {tot_loss / tot_seen:.4f} | "
                    f"train acc {100 * tot_right / tot_seen:.1f}% | {rate}{split.take()}"
                )
                history["train"].append((step, float(tot_loss / tot_seen), float(tot_right / tot_seen)))
                loss_sum, right, seen = 0.0, 0.0, 0
            if step >= total_steps:
                break
        if sampler.position < steps_per_epoch:
            break  # stopped by --max-steps mid-epoch
        speed.pause()
        sampler.set_epoch(epoch + 1)
        if step < total_steps:  # (the last epoch's score is the final evaluation below)
            result = evaluate(ctx, model, task, args.eval_batch_size)
            history["test"].append((epoch + 1, result["accuracy"]))
            ctx.log(
                f"epoch {epoch + 1} done | test {describe(task, result)} | "
                f"{common.format_duration(time.perf_counter() - started)} elapsed"
            )
        if args.save:
            checkpoint()
        common.restart_clocks(opt, speed)

    speed.pause()
    if args.save and saved_at != step:
        checkpoint()
    elapsed = time.perf_counter() - started
    result = evaluate(ctx, model, task, args.eval_batch_size)
    history["test"].append((sampler.epoch + (sampler.position > 0), result["accuracy"]))
    result.update(
        preset=preset,
        steps=step,
        history=history,
        seconds=elapsed,
        images_per_s=speed.overall(),
        ranks=ctx.size,
        multilabel=task.multilabel,
        params=common.snapshot(model),
    )
    common.print_footer(ctx, opt, args, f"test {describe(task, result)}", step, elapsed, speed)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``lm``/``cnn``), train, and return the run's numbers and final parameters."""
    return common.run_program(build_parser().parse_args(argv), train, PRESETS, OVERRIDES)
