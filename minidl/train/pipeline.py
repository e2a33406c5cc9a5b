"""The LSTM language model trained with layer pipelining (GPipe or 1F1B), under mpiexec.

    mpiexec -n 3 python -m minidl.train.pipeline --schedule 1f1b --micro-batches 4
    mpiexec -n 4 python -m minidl.train.pipeline --pipeline-stages 2 --layers 2     # 2 x 2 dp x pp

It takes every flag of ``python -m minidl.train lm`` (presets, --quick, --max-steps, --save ...) plus
``--schedule``, ``--micro-batches`` and ``--pipeline-stages``; ``run_lm`` is the entry point for
``python -m minidl.train lm --parallel pipeline`` once that choice is wired into ``minidl.train``.

The model is the chain of units [embedding, LSTM layer 0, ..., LSTM layer L-1, decoder], cut into
``--pipeline-stages`` contiguous blocks (default: every rank a stage, so P <= L + 2); with fewer stages than
ranks, the ranks form dp = P / pp pipelines (``make_grid``) that each take their own streams of the corpus
and average gradients within each stage's data-parallel group. Each window of B streams x T words is cut
into m micro-batches of streams (``--micro-batches``); every stage keeps the LSTM state of each micro-batch
of streams across windows (truncated BPTT, as the serial program). Gradients are clipped to the joint
global norm over the stages, so the run takes the same steps as ``python -m minidl.train lm`` with
dp * B streams (up to rounding: the tests check 1e-8 in float64).

Printed: loss and perplexity, words/s, the measured bubble of the last step against (p-1)/(m+p-1), and
the most micro-batches whose activations a stage held. ``--save`` writes the dense model's parameters
(gathered on rank 0, ``minidl.save``); resuming a pipelined run is not supported.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import optim
from minidl.data.text import batchify, bptt_batches, num_bptt_batches
from minidl.distributed.model_parallel.layerwise import (
    LSTMLayers,
    clip_grad_norm_split,
    gather_state_dict,
    stage_ranges,
)
from minidl.distributed.pipeline.engine import Pipeline, make_grid
from minidl.distributed.pipeline.schedule import SCHEDULES, bubble_formula, bubble_fraction
from minidl.models.lm import LSTMLanguageModel
from minidl.nn.module import Module
from minidl.tensor import Tensor
from minidl.train import lm


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``--parallel pipeline``."""
    group = parser.add_argument_group("pipeline parallelism (--parallel pipeline, under mpiexec -n P)")
    group.add_argument("--schedule", choices=SCHEDULES, default="1f1b", help="pipeline schedule (default 1f1b)")
    group.add_argument(
        "--micro-batches",
        type=int,
        default=4,
        metavar="M",
        help="micro-batches per window (default 4; at most the streams per rank)",
    )
    group.add_argument(
        "--pipeline-stages",
        type=int,
        default=None,
        metavar="PP",
        help="stages per pipeline (default: all ranks); the ranks form P/PP data-parallel pipelines",
    )


class LMPipelineStage(Module):
    """A block of the LM's units [embedding, LSTM layers, decoder] as a pipeline stage: ``forward(x)`` on
    one tensor, the LSTM state kept per micro-batch of streams.

    The Pipeline runs the forwards of a window in micro-batch order 0..m-1 under both schedules, so the
    k-th call of a window is micro-batch k. ``start_window()`` detaches the states (truncated BPTT);
    ``reset()`` forgets them (zeros at the next call). Parameter names are the dense model's.
    """

    def __init__(self, model: LSTMLanguageModel, units: range, micro_batches: int):
        super().__init__()
        L = model.num_layers
        self.hidden_size, self.drop, self.micro_batches = model.hidden_size, model.drop, micro_batches
        if 0 in units:
            self.embedding = model.embedding
        lo, hi = max(units.start, 1) - 1, min(units.stop, L + 1) - 1
        self.lstm = LSTMLayers(model.lstm, lo, hi) if hi > lo else None
        if L + 1 in units:
            self.decoder = model.decoder
        self.states: list[tuple[Tensor, Tensor] | None] = [None] * micro_batches
        self.calls = 0

    def start_window(self) -> None:
        self.states = [None if s is None else (s[0].detach(), s[1].detach()) for s in self.states]
        self.calls = 0

    def reset(self) -> None:
        self.states, self.calls = [None] * self.micro_batches, 0

    def forward(self, x: Any) -> Tensor:
        k = self.calls % self.micro_batches
        self.calls += 1
        h = self.drop(self.embedding(x)) if "embedding" in self._modules else x
        if self.lstm is not None:
            if self.states[k] is None:
                n, B = self.lstm.hi - self.lstm.lo, h.shape[1]
                zeros = np.zeros((n, B, self.hidden_size), h.dtype)
                self.states[k] = (minidl.tensor(zeros), minidl.tensor(zeros))
            h, self.states[k] = self.lstm(h, self.states[k])
        if "decoder" in self._modules:
            T, B = h.shape[0], h.shape[1]
            return self.decoder(self.drop(h).reshape(T * B, self.hidden_size))
        return h


def lm_loss(logits: Tensor, y: np.ndarray) -> Tensor:
    """Mean cross-entropy over the micro-batch's T x B_i next-word predictions."""
    return F.cross_entropy(logits, y.reshape(-1))


def run_lm(args: argparse.Namespace, ctx: Any, cfg: Any, corpus: Any, preset: str) -> dict[str, Any]:
    """Train the LM pipelined (called by ``minidl.train.lm`` for ``--parallel pipeline``)."""
    comm, m = ctx.comm, args.micro_batches
    pp = args.pipeline_stages or comm.Get_size()
    grid = make_grid(comm, pp)
    L = cfg.num_layers
    if pp > L + 2:
        raise ValueError(
            f"--parallel pipeline: {pp} stages but the model has only {L + 2} units "
            f"(embedding, {L} LSTM layers, decoder); use --layers {pp - 2} or more, or fewer stages"
        )
    B, T = cfg.batch_size, cfg.num_steps
    if m < 1 or m > B:
        raise ValueError(f"--micro-batches must be between 1 and the streams per pipeline (--batch-size {B}), got {m}")
    model = LSTMLanguageModel(len(corpus.vocab), cfg.hidden_size, L, cfg.dropout, init_scale=cfg.init_scale)
    stage = LMPipelineStage(model, stage_ranges(L + 2, pp, None)[grid.stage], m)
    pipe = Pipeline(stage, lm_loss, args.schedule, m, grid.pp_comm, batch_axis=1)
    params = list(stage.parameters())
    opt = optim.SGD(params, lr=cfg.lr)
    if grid.dp > 1:
        opt = dist.DistributedOptimizer(opt, allreduce=args.allreduce, comm=grid.dp_comm)
    train_data = batchify(corpus.train, B, grid.replica, grid.dp)
    steps_per_epoch = num_bptt_batches(train_data.shape[0], T)
    max_steps = args.max_steps or cfg.epochs * steps_per_epoch
    ctx.log(
        f"LSTM language model, preset {preset!r}, pipelined: {pp} stages x {grid.dp} data-parallel, "
        f"schedule {args.schedule}, {m} micro-batches of the {B} streams per pipeline"
    )
    ctx.log(
        f"  corpus {corpus.name}: vocabulary {len(corpus.vocab):,}; T={T}, {steps_per_epoch} steps/epoch, "
        f"at most {max_steps} steps; stage {grid.stage} of rank {comm.Get_rank()}: {stage.extra_repr() or ''}"
    )

    def total(values: list[float]) -> np.ndarray:
        """Sums over all ranks (only last stages contribute losses)."""
        return ctx.sum(values if pipe.is_last else [0.0] * len(values))

    def evaluate(ids: np.ndarray) -> float:
        data = batchify(ids, max(args.eval_batch_size, m), grid.replica, grid.dp)
        stage.reset()
        stage.eval()  # no dropout
        loss = words = 0.0
        for x, y in bptt_batches(data, T, drop_last=False):
            stage.start_window()
            mean = pipe.eval_step(x, y)
            loss, words = loss + (mean or 0.0) * y.size, words + y.size
        stage.reset()
        stage.train()
        loss, words = total([loss, words])
        return float(loss / words)

    step, epoch, started, history = 0, 1, time.perf_counter(), {"train": [], "valid": []}
    log_every = args.log_every or max(1, steps_per_epoch // 10)
    loss_sum = words = 0.0
    while epoch <= cfg.epochs and step < max_steps:
        for group in opt.param_groups:
            group["lr"] = cfg.lr_at(epoch)
        for x, y in bptt_batches(train_data, T):
            stage.start_window()
            opt.zero_grad()
            mean = pipe.train_step(x, y)
            if isinstance(opt, dist.DistributedOptimizer):
                opt.synchronize()  # average over the replicas of this stage before clipping
            clip_grad_norm_split(params, cfg.max_grad_norm, grid.pp_comm, algorithm=args.allreduce)
            opt.step()
            step += 1
            loss_sum, words = loss_sum + (mean or 0.0) * y.size, words + y.size
            if step % log_every == 0 or step == max_steps:
                s, w = total([loss_sum, words])
                rate = grid.dp * B * T * step / (time.perf_counter() - started)
                ctx.log(f"epoch {epoch} step {step} | loss {s / w:.3f} | ppl {np.exp(s / w):.2f} | {rate:,.0f} words/s")
                history["train"].append((step, float(np.exp(s / w))))
                loss_sum = words = 0.0
            if step >= max_steps:
                break
        if step >= max_steps and step % steps_per_epoch:
            break
        valid = float(np.exp(evaluate(corpus.valid)))
        history["valid"].append((epoch, valid))
        ctx.log(f"epoch {epoch} done | valid ppl {valid:.2f}")
        epoch += 1
        stage.reset()
    elapsed = time.perf_counter() - started
    # the last training step's schedule, as it ran (gather_events is collective over the pipeline)
    events = pipe.gather_events()
    peaks = dist.gather_states(np.array([pipe.peak_stashed]), 0, grid.pp_comm)
    test_ppl = float(np.exp(evaluate(corpus.test)))
    result: dict[str, Any] = {
        "preset": preset,
        "steps": step,
        "test_ppl": test_ppl,
        "seconds": elapsed,
        "words_per_s": grid.dp * B * T * step / elapsed,
        "history": history,
        "dp": grid.dp,
        "pp": pp,
    }
    if events is not None:
        result["bubble"], result["bubble_formula"] = bubble_fraction(events, pp), bubble_formula(m, pp)
        result["peak_stashed"] = [int(a[0]) for a in peaks]
        ctx.log(
            f"last step: measured bubble {result['bubble']:.3f} vs (p-1)/(m+p-1) = {result['bubble_formula']:.3f}"
            f" | micro-batches held per stage (peak): {result['peak_stashed']}"
        )
    ctx.log(f"{lm.score_line(result, corpus)} | {step} steps in {elapsed:.1f} s, {result['words_per_s']:,.0f} words/s")
    state = gather_state_dict(stage, 0, grid.pp_comm) if grid.replica == 0 else None
    if state is not None:
        result["params"] = state
        if args.save:
            minidl.save(state, args.save)
            print(f"saved the dense model's parameters to {args.save}", flush=True)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """``python -m minidl.train.pipeline [flags]`` is ``python -m minidl.train lm --parallel pipeline [flags]``."""
    return lm.main(["--parallel", "pipeline", *(argv if argv is not None else sys.argv[1:])])


if __name__ == "__main__":
    main()
