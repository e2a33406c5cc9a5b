"""``--parallel model`` and ``--parallel tensor`` for ``python -m minidl.train lm|cnn``: one model split over ranks.

    mpiexec -n 4 python -m minidl.train lm --parallel model --layers 2     # embedding | LSTM 0 | LSTM 1 | decoder
    mpiexec -n 2 python -m minidl.train lm --parallel tensor               # decoder + softmax split by vocabulary
    mpiexec -n 3 python -m minidl.train cnn --parallel model               # ResNet blocks in 3 stages
    mpiexec -n 2 python -m minidl.train cnn --parallel tensor              # classifier split by class

Entry points: ``train_lm`` / ``train_cnn(ctx, args, preset, config)``, called by ``minidl.train.lm`` /
``.cnn`` for these two modes once ``common.run_program`` has seeded every rank alike and joined the job.

Unlike ``--parallel data``, every rank works on the *same* batch (``--batch-size`` is the whole batch)
and holds only part of the model, so P ranks take exactly the steps one process takes (the tests
check parameters to 1e-8 in float64):

- **model** (``minidl.distributed.model_parallel``): rank r holds a contiguous block of layers. LM:
  units [embedding, LSTM layer 0, ..., LSTM layer L-1, decoder], so P <= L + 2. CNN: the ResNet as the
  chain [stem conv, bn, relu, block, block, ..., pool, flatten, fc], balanced by parameter count.
  Activations go forward and gradients back through differentiable send/recv; one rank computes at a time.
- **tensor** (``minidl.distributed.tensor_parallel``, Megatron-style): LM: the [V, H] decoder and the
  softmax are split by vocabulary (the model's largest layer and costliest step when V is large);
  embedding and LSTM are replicated, the same computation on every rank. CNN: the classifier ``fc`` is
  column-parallel (split by class, logits gathered); the convolutional trunk is replicated. This is the
  layer Megatron would split in a classifier; for a small head it demonstrates the mechanism, not a speedup.

Each progress line and the final report give the bytes this rank sent per step (every message counted
by ``p2p.CountingComm``: activations, gradients, allreduces and their agreement checks, the clipping
norm), the number to compare with ``--parallel data``'s gradient allreduce.
``--save PATH`` writes the dense model's parameters at the end (gathered on rank 0; ``minidl.save`` of
{"model": state_dict, "steps", "parallel"}). Not supported in these modes: ``--resume``, ``--compression``,
``--sync-bn`` (a clear error).
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.text import batchify, bptt_batches, num_bptt_batches
from minidl.distributed.counting import CountingComm
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import tensor_parallel as tp
from minidl.models.lm import LSTMLanguageModel
from minidl.nn.module import Module
from minidl.tensor import Tensor
from minidl.train import common
from minidl.train.common import Context

MODES = ("model", "tensor")


# ----------------------------------------------------------------------------- setup and reporting
def _check_flags(args: argparse.Namespace, program: str) -> None:
    if args.parallel not in MODES:
        raise ValueError(f"minidl.train.model_parallel runs --parallel model|tensor, not {args.parallel!r}")
    unsupported = [
        flag
        for flag, on in (
            ("--resume", args.resume),
            ("--compression", getattr(args, "compression", "none") != "none"),
            ("--sync-bn", getattr(args, "sync_bn", False)),
        )
        if on
    ]
    if unsupported:
        raise SystemExit(
            f"python -m minidl.train {program} --parallel {args.parallel}: {', '.join(unsupported)} "
            "not supported in this mode (use --parallel data or none)"
        )


def _algorithm(ctx: Context) -> str:
    """The allreduce of tensor parallelism and of the clipping norm: collectives' own (so that its bytes are
    counted); "mpi" (MPI's Allreduce, which a CountingComm cannot see) falls back to ring."""
    return "ring" if ctx.algorithm == "mpi" else ctx.algorithm


class Traffic:
    """Bytes and messages this rank sent per step, between progress lines and over the run."""

    def __init__(self, counting: CountingComm):
        self.counting, self.steps, self.total = counting, 0, 0
        self._window_steps = 0

    def step(self) -> None:
        self.steps += 1
        self._window_steps += 1

    def take(self) -> str:
        _, nbytes = self.counting.reset()
        self.total += nbytes
        per_step = nbytes / max(self._window_steps, 1)
        self._window_steps = 0
        return f" | sent {per_step / 1024:,.1f} KiB/step (rank {self.counting.Get_rank()})"

    def per_rank(self, ctx: Context) -> np.ndarray:
        """Mean bytes sent per step by every rank (an allreduce on the uncounted communicator)."""
        _, nbytes = self.counting.reset()
        self.total += nbytes
        mine = np.zeros(ctx.size)
        mine[ctx.rank] = self.total / max(self.steps, 1)
        return ctx.sum(mine)


def _save(ctx: Context, args: argparse.Namespace, params: dict[str, np.ndarray] | None, steps: int) -> None:
    if args.save and ctx.rank == 0:
        minidl.save({"model": params, "steps": steps, "parallel": args.parallel}, args.save)
        ctx.log(f"dense parameters: {args.save}")


def _report_traffic(ctx: Context, per_rank: np.ndarray) -> None:
    ctx.log(
        "bytes sent per step: "
        + ", ".join(f"rank {r} {b / 1024:,.1f} KiB" for r, b in enumerate(per_rank))
        + f" | total {per_rank.sum() / 1024:,.1f} KiB"
    )


# ----------------------------------------------------------------------------- the language model
class _LMSplit:
    """One interface over the two splits of the LM: forward, the loss where it lives, parameters."""

    def __init__(self, mode: str, model: LSTMLanguageModel, comm: Any, algorithm: str):
        self.mode = mode
        if mode == "model":
            self.net: Module = mp.LMStage(model, comm)
            self.has_loss = self.net.is_last
            self.reports = self.net.is_last  # the rank whose loss is printed
        else:
            self.net = tp.TensorParallelLM(model, comm, algorithm)
            self.has_loss, self.reports = True, comm.Get_rank() == 0

    def own_and_replicated(self) -> tuple[list, list]:
        if self.mode == "model":
            return list(self.net.parameters()), []
        return self.net.sharded_parameters(), self.net.replicated_parameters()

    def step(self, x: np.ndarray, y: np.ndarray, state: Any) -> tuple[Tensor, Tensor | None, Any]:
        """Forward; returns (what to call backward on, the mean loss or None, the new state)."""
        out, state = self.net(x, state)
        if not self.has_loss:
            return out, None, state
        loss = F.cross_entropy(out, y.reshape(-1)) if self.mode == "model" else self.net.loss(out, y)
        return loss, loss, state


def _lm_evaluate(ctx: Context, split: _LMSplit, ids: np.ndarray, batch_size: int, num_steps: int) -> float:
    """Mean cross-entropy (nats/word) over ``ids`` through the split model."""
    data = batchify(ids, batch_size)
    split.net.eval()
    total, words = 0.0, 0
    with minidl.no_grad():
        state = None
        for x, y in bptt_batches(data, num_steps, drop_last=False):
            _, loss, state = split.step(x, y, state)
            if split.reports:
                total += float(loss.data) * y.size
                words += y.size
    split.net.train()
    total, words = ctx.sum([total, words])
    return total / words


def train_lm(ctx: Context, args: argparse.Namespace, preset: str, cfg: Any) -> dict[str, Any]:
    """Train the LM split over ``ctx``'s ranks (``args.parallel``: "model" or "tensor"); returns the run's
    numbers, with the dense model's parameters on rank 0."""
    from minidl.train import lm

    _check_flags(args, "lm")
    counting, algorithm = CountingComm(ctx.comm), _algorithm(ctx)
    corpus = lm.load_corpus(args, preset)
    B, T = cfg.batch_size, cfg.num_steps
    train_data = batchify(corpus.train, B)  # every rank: all B streams (the model is split, not the data)
    steps_per_epoch = num_bptt_batches(train_data.shape[0], T)
    if steps_per_epoch == 0:
        raise ValueError(f"the training split ({corpus.train.size} words) is too short for {B} streams of {T} words")
    model = LSTMLanguageModel(
        len(corpus.vocab), cfg.hidden_size, cfg.num_layers, cfg.dropout, init_scale=cfg.init_scale
    )
    n_params = sum(p.data.size for p in model.parameters())
    split = _LMSplit(args.parallel, model, counting, algorithm)
    del model  # each rank keeps its own part only
    own, replicated = split.own_and_replicated()
    opt = optim.SGD(own + replicated, lr=cfg.lr)
    max_steps = args.max_steps or cfg.epochs * steps_per_epoch
    held = sum(p.data.size for p in own + replicated)
    common.print_header(
        ctx,
        f"LSTM language model, preset {preset!r}: {cfg.num_layers} x {cfg.hidden_size} LSTM, "
        f"{n_params:,} parameters ({args.dtype})",
        [
            f"corpus {corpus.name}: vocabulary {len(corpus.vocab):,}, train {corpus.train.size:,} words",
            f"B={B} streams x T={T} steps (the whole batch on every rank), {steps_per_epoch} steps/epoch; SGD lr "
            f"{cfg.lr}, clip {cfg.max_grad_norm}, {cfg.epochs} epochs"
            + (f", at most {max_steps} steps" if args.max_steps else ""),
            f"{args.parallel} parallel over {ctx.size} ranks: rank 0 holds {held:,} parameters "
            f"({'allreduce ' + algorithm if args.parallel == 'tensor' else repr(split.net).splitlines()[0]})",
        ],
    )
    log_every = args.log_every or max(1, steps_per_epoch // 10)
    speed, traffic = common.Throughput("words", 1, args.baseline_wps), Traffic(counting)
    loss_sum, loss_words, step, epoch = 0.0, 0, 0, 1
    started, valid_ppl = time.perf_counter(), float("nan")
    history: dict[str, list] = {"train": [], "valid": []}
    while epoch <= cfg.epochs and step < max_steps:
        common.set_lr(opt, cfg.lr_at(epoch))
        state, window = None, 0
        for x, y in bptt_batches(train_data, T):
            target, loss, state = split.step(x, y, None if state is None else split.net.detach_state(state))
            opt.zero_grad()
            target.backward()
            mp.clip_grad_norm_split(own, cfg.max_grad_norm, counting, replicated, algorithm)
            opt.step()
            step, window = step + 1, window + 1
            traffic.step()
            speed.add(y.size)
            if split.reports:
                loss_sum, loss_words = loss_sum + float(loss.data) * y.size, loss_words + y.size
            if step % log_every == 0 or step == max_steps:
                rate, sent = speed.take(), traffic.take()
                total, words = ctx.sum([loss_sum, loss_words])
                ctx.log(
                    lm.progress_line(epoch, window, steps_per_epoch, cfg.lr_at(epoch), total / words)
                    + f" | {rate}{sent}"
                )
                history["train"].append((step, float(np.exp(total / words))))
                loss_sum, loss_words = 0.0, 0
            if step >= max_steps:
                break
        if window < steps_per_epoch:
            break
        speed.pause()
        valid_ppl = float(np.exp(_lm_evaluate(ctx, split, corpus.valid, args.eval_batch_size, T)))
        history["valid"].append((epoch, valid_ppl))
        ctx.log(
            f"epoch {epoch} done | valid ppl {valid_ppl:.2f} | "
            f"{common.format_duration(time.perf_counter() - started)} elapsed"
        )
        epoch += 1
        speed.resume()
    speed.pause()
    elapsed = time.perf_counter() - started
    per_rank = traffic.per_rank(ctx)
    test_ppl = float(np.exp(_lm_evaluate(ctx, split, corpus.test, args.eval_batch_size, T)))
    params = (
        mp.gather_state_dict(split.net, comm=ctx.comm) if args.parallel == "model" else split.net.dense_state_dict()
    )
    result: dict[str, Any] = {
        "preset": preset,
        "parallel": args.parallel,
        "steps": step,
        "test_ppl": test_ppl,
        "valid_ppl": valid_ppl,
        "seconds": elapsed,
        "words_per_s": speed.overall(),
        "ranks": ctx.size,
        "history": history,
        "bytes_per_step": per_rank,
        "params": params if ctx.rank == 0 else None,
    }
    ctx.log(
        f"{lm.score_line(result, corpus)} | {step} steps in {common.format_duration(elapsed)}, "
        f"{result['words_per_s']:,.0f} words/s "
        f"on {ctx.size} ranks ({args.parallel} parallel)"
    )
    _report_traffic(ctx, per_rank)
    _save(ctx, args, params, step)
    return result


# ----------------------------------------------------------------------------- the CNN
def resnet_units(model: nn.ResNet) -> tuple[nn.Sequential, list[str]]:
    """The ResNet as a chain of units (stem conv, bn, relu, each BasicBlock, pool, flatten, fc) and each
    unit's name in the ResNet (``"layer2.0"``), so split stages can be mapped back to the dense names."""
    names = ["conv1", "bn1", "relu"]
    names += [f"layer{s + 1}.{k}" for s in range(model.num_stages) for k in range(len(getattr(model, f"layer{s + 1}")))]
    names += ["avgpool", "flatten", "fc"]
    units = []
    for name in names:
        unit = model
        for part in name.split("."):
            unit = unit[int(part)] if part.isdigit() else getattr(unit, part)
        units.append(unit)
    return nn.Sequential(*units), names


def _dense_names(state: dict[str, np.ndarray], names: list[str]) -> dict[str, np.ndarray]:
    """``"5.conv1.weight"`` (unit 5 of ``resnet_units``) -> ``"layer1.2.conv1.weight"``."""
    out = {}
    for key, value in state.items():
        unit, _, rest = key.partition(".")
        out[f"{names[int(unit)]}.{rest}"] = value
    return out


class _CNNSplit:
    def __init__(self, mode: str, model: nn.ResNet, comm: Any, algorithm: str):
        self.mode = mode
        if mode == "model":
            seq, self.names = resnet_units(model)
            self.net: Module = mp.SequentialStage(seq, comm, balance="parameters")
            self.has_output = self.net.is_last
        else:
            model.fc = tp.ColumnParallelLinear.from_dense(model.fc, gather_output=True, comm=comm, algorithm=algorithm)
            self.net, self.has_output = model, True
        self.reports = self.has_output if mode == "model" else comm.Get_rank() == 0

    def forward(self, x: np.ndarray) -> Tensor:
        if self.mode == "model" and not self.net.is_first:
            return self.net(None)
        return self.net(minidl.tensor(x.astype(minidl.get_default_dtype(), copy=False)))

    def dense_state(self, comm: Any) -> dict[str, np.ndarray] | None:
        if self.mode == "model":
            state = mp.gather_state_dict(self.net, comm=comm)
            return None if state is None else _dense_names(state, self.names)
        state = {k: v for k, v in self.net.state_dict().items() if not k.startswith("fc.")}
        state["fc.weight"], state["fc.bias"] = tp.gather_linear(self.net.fc)
        return state


def _cnn_evaluate(ctx: Context, split: _CNNSplit, task: Any, batch_size: int) -> dict[str, Any]:
    from minidl.train import cnn

    n = task.x_test.shape[0]
    split.net.eval()
    right = np.zeros(task.num_outputs if task.multilabel else 1)
    exact, loss = 0.0, 0.0
    with minidl.no_grad():
        for start in range(0, n, batch_size):
            x, y = task.x_test[start : start + batch_size], task.y_test[start : start + batch_size]
            out = split.forward(x)
            if split.reports:
                loss += float(cnn.loss_fn(task, out, y).data) * len(x)
                ok = cnn.correct(task, out.data, y)
                right += ok.sum(axis=0)
                exact += ok.all(axis=1).sum()
    split.net.train()
    totals = ctx.sum([*right, exact, loss])
    per_label = totals[: right.size] / n
    return {
        "accuracy": float(per_label.mean()),
        "per_label": per_label,
        "exact": float(totals[right.size] / n),
        "loss": float(totals[-1] / n),
    }


def train_cnn(ctx: Context, args: argparse.Namespace, preset: str, cfg: Any) -> dict[str, Any]:
    """Train the ResNet split over ``ctx``'s ranks (``args.parallel``: "model" or "tensor"); returns the run's
    numbers, with the dense model's parameters on rank 0."""
    from minidl.train import cnn

    _check_flags(args, "cnn")
    counting, algorithm = CountingComm(ctx.comm), _algorithm(ctx)
    task = cnn.load_task(args, cfg)
    sampler = dist.DistributedSampler(task.x_train.shape[0], cfg.batch_size, seed=args.seed, rank=0, size=1)
    steps_per_epoch = len(sampler)
    model = nn.resnet(cfg.depth, task.num_outputs, task.x_train.shape[1], cfg.width)
    n_params = sum(p.data.size for p in model.parameters())
    split = _CNNSplit(args.parallel, model, counting, algorithm)
    params = list(split.net.parameters())
    opt = optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)
    schedule_steps = cfg.epochs * steps_per_epoch
    total_steps = min(args.max_steps or schedule_steps, schedule_steps)
    warmup = max(1, min(int(cfg.warmup_epochs * steps_per_epoch), schedule_steps - 1))
    schedule = optim.lr_scheduler.warmup_cosine(opt, warmup, max(schedule_steps, warmup + 1))
    sampler.set_epoch(0)
    where = (
        f"rank 0 holds units {split.names[split.net.layer_range.start]}..{split.names[split.net.layer_range[-1]]}"
        if args.parallel == "model"
        else f"fc split by class, allreduce {algorithm}"
    )
    common.print_header(
        ctx,
        f"ResNet-{cfg.depth} (width {cfg.width}), preset {preset!r}: {n_params:,} parameters ({args.dtype})",
        [
            f"data: {task.name}: train {task.x_train.shape}, {task.num_outputs} outputs",
            f"batch {cfg.batch_size} (the whole batch on every rank), {steps_per_epoch} steps/epoch, {cfg.epochs} "
            f"epochs; SGD lr {cfg.lr} momentum {cfg.momentum} wd {cfg.weight_decay}, warmup {warmup} then cosine",
            f"{args.parallel} parallel over {ctx.size} ranks: {where}; rank 0 holds {sum(p.data.size for p in params):,} "
            "parameters",
        ],
    )
    log_every = args.log_every or max(1, steps_per_epoch // 5)
    speed, traffic = common.Throughput("images", 1, args.baseline_wps), Traffic(counting)
    step, loss_sum, seen = 0, 0.0, 0
    started = time.perf_counter()
    history: dict[str, list] = {"train": [], "test": []}
    while step < total_steps:
        epoch = sampler.epoch
        for idx in sampler:
            x, y = task.x_train[idx], task.y_train[idx]
            out = split.forward(x)
            loss = cnn.loss_fn(task, out, y) if split.has_output else None
            opt.zero_grad()
            (loss if loss is not None else out).backward()
            opt.step()
            schedule.step()
            step += 1
            traffic.step()
            speed.add(len(idx))
            if split.reports:
                loss_sum, seen = loss_sum + float(loss.data) * len(idx), seen + len(idx)
            if step % log_every == 0 or step == total_steps:
                rate, sent = speed.take(), traffic.take()
                tot_loss, tot_seen = ctx.sum([loss_sum, seen])
                ctx.log(
                    f"epoch {epoch + 1} step {sampler.position}/{steps_per_epoch} | lr "
                    f"{opt.param_groups[0]['lr']:.3g} | loss {tot_loss / tot_seen:.4f} | {rate}{sent}"
                )
                history["train"].append((step, float(tot_loss / tot_seen)))
                loss_sum, seen = 0.0, 0
            if step >= total_steps:
                break
        if sampler.position < steps_per_epoch:
            break
        sampler.set_epoch(epoch + 1)
    speed.pause()
    elapsed = time.perf_counter() - started
    per_rank = traffic.per_rank(ctx)
    result = _cnn_evaluate(ctx, split, task, args.eval_batch_size)
    params_state = split.dense_state(ctx.comm)
    result.update(
        preset=preset,
        parallel=args.parallel,
        steps=step,
        history=history,
        seconds=elapsed,
        images_per_s=speed.overall(),
        ranks=ctx.size,
        bytes_per_step=per_rank,
        params=params_state if ctx.rank == 0 else None,
    )
    ctx.log(
        f"test {cnn.describe(task, result)} | {step} steps in {common.format_duration(elapsed)} on {ctx.size} "
        f"ranks ({args.parallel} parallel), {result['images_per_s']:,.0f} images/s"
    )
    _report_traffic(ctx, per_rank)
    _save(ctx, args, params_state, step)
    return result
