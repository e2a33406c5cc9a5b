"""``--parallel pipeline``: the LM's units cut into stages, each window cut into micro-batches (GPipe or 1F1B).

The chain of units [embedding, LSTM layer 0, ..., LSTM layer L-1, decoder] is cut into
``--pipeline-stages`` contiguous blocks (default: every rank a stage, so P <= L + 2); with fewer stages
than ranks, the ranks form dp = P / pp pipelines (``make_grid``) that each take their own streams and
average gradients within each stage's data-parallel group. Each window of B streams x T words is cut
into m micro-batches of streams; every stage keeps the LSTM state of each micro-batch across windows
(truncated BPTT). Gradients are clipped to the joint global norm over the stages, so the run takes the
steps of ``--parallel none`` with dp * B streams (the tests check 1e-8 in float64). The report gives the
bubble measured on the last training step against (p-1)/(m+p-1), and the most micro-batches whose
activations each stage held at once in it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl.distributed.model_parallel.layerwise import (
    LSTMLayers,
    clip_grad_norm_split,
    gather_state_dict,
    stage_ranges,
)
from minidl.distributed.pipeline.schedule import bubble_formula, bubble_fraction
from minidl.models.lm import LSTMLanguageModel
from minidl.nn.module import Module
from minidl.tensor import Tensor
from minidl.train.strategies.split import ModelParallel


class LMPipelineStage(Module):
    """A block of the LM's units as a pipeline stage: ``forward(x)`` on one tensor, the LSTM state kept per
    micro-batch (the k-th call of a window is micro-batch k under both schedules). Dense parameter names."""

    def __init__(self, model: LSTMLanguageModel, units: range, micro_batches: int):
        super().__init__()
        L = model.num_layers
        self.hidden_size, self.drop, self.micro_batches, self.units = (
            model.hidden_size,
            model.drop,
            micro_batches,
            units,
        )
        if 0 in units:
            self.embedding = model.embedding
        lo, hi = max(units.start, 1) - 1, min(units.stop, L + 1) - 1
        self.lstm = LSTMLayers(model.lstm, lo, hi) if hi > lo else None
        if L + 1 in units:
            self.decoder = model.decoder
        self.reset()

    def start_window(self) -> None:
        """Truncated BPTT: the states go on, their history does not."""
        self.states = [None if s is None else (s[0].detach(), s[1].detach()) for s in self.states]
        self.calls = 0

    def reset(self) -> None:
        self.states: list[tuple[Tensor, Tensor] | None] = [None] * self.micro_batches
        self.calls = 0

    def forward(self, x: Any) -> Tensor:
        k, self.calls = self.calls % self.micro_batches, self.calls + 1
        h = self.drop(self.embedding(x)) if "embedding" in self._modules else x
        if self.lstm is not None:
            if self.states[k] is None:
                zeros = np.zeros((self.lstm.hi - self.lstm.lo, h.shape[1], self.hidden_size), h.dtype)
                self.states[k] = (minidl.tensor(zeros), minidl.tensor(zeros))
            h, self.states[k] = self.lstm(h, self.states[k])
        if "decoder" in self._modules:
            return self.decoder(self.drop(h).reshape(h.shape[0] * h.shape[1], self.hidden_size))
        return h


def lm_loss(logits: Tensor, y: np.ndarray) -> Tensor:
    return F.cross_entropy(logits, y.reshape(-1))


class PipelineParallel(ModelParallel):
    """stages of units over micro-batches, GPipe or 1F1B."""

    refuses = ("--resume", "--compression", "--sync-bn")

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.pp, self.m = args.pipeline_stages or ctx.size, args.micro_batches
        self.grid = dist.make_grid(ctx.comm, self.pp)
        self.shard = self.eval_share = (self.grid.replica, self.grid.dp)
        self.replicas, self.min_streams = self.grid.dp, self.m

    def build(self, task: Any, model: Module) -> None:
        L, B = model.num_layers, task.cfg.batch_size
        self.B = B
        if self.pp > L + 2:
            raise ValueError(
                f"--parallel pipeline: {self.pp} stages but the model has only {L + 2} units "
                f"(embedding, {L} LSTM layers, decoder); use --layers {self.pp - 2} or more, or fewer stages"
            )
        if not 1 <= self.m <= B:
            raise ValueError(
                f"--micro-batches must be between 1 and the streams per pipeline (--batch-size {B}), got {self.m}"
            )
        self.net = LMPipelineStage(model, stage_ranges(L + 2, self.pp, None)[self.grid.stage], self.m)
        self.pipe = dist.Pipeline(self.net, lm_loss, self.args.schedule, self.m, self.grid.pp_comm, batch_axis=1)
        self.params = self.own = list(self.net.parameters())
        self.replicated, self.reports, self.task = [], self.pipe.is_last, task.name
        self.base = self.opt = task.optimizer(self.params)
        if self.grid.dp > 1:
            self.opt = dist.DistributedOptimizer(self.base, allreduce=self.args.allreduce, comm=self.grid.dp_comm)

    def describe(self) -> list[str]:
        u, g = self.net.units, self.grid
        return [
            f"pipelined: {self.pp} stages x {g.dp} data-parallel, schedule {self.args.schedule}, {self.m} micro-batches "
            f"of the {self.B} streams per pipeline; rank 0 holds units {u.start}..{u.stop - 1} "
            f"(0 = embedding, then the LSTM layers, then the decoder)"
        ]

    def train_step(self, task: Any, batch: Any) -> float | None:
        self.net.start_window()
        self.opt.zero_grad()
        mean = self.pipe.train_step(*batch)
        if self.grid.dp > 1:
            self.opt.synchronize()  # average over the replicas of this stage before clipping
        clip_grad_norm_split(self.params, task.max_grad_norm, self.grid.pp_comm, algorithm=self.args.allreduce)
        self.opt.step()
        return mean

    def eval_loss(self, task: Any, batch: Any) -> tuple[Any, float | None]:
        self.net.start_window()
        return None, self.pipe.eval_step(*batch)

    def evaluate(self, task: Any, split: str) -> dict[str, Any]:
        self.net.reset()  # evaluation starts from zero states, and so does the next epoch
        result = task.evaluate(self, split)
        self.net.reset()
        return result

    def suffix(self) -> str:
        return ""

    def dense_params(self) -> dict[str, np.ndarray] | None:
        state = gather_state_dict(self.net, 0, self.grid.pp_comm) if self.grid.replica == 0 else None
        return state if self.ctx.rank == 0 else None

    def report(self, result: dict[str, Any]) -> list[str]:
        events = self.pipe.gather_events()  # collective over the pipeline: the last training step as it ran
        peaks = dist.gather_states(np.array([self.pipe.peak_stashed]), 0, self.grid.pp_comm)
        lines = []
        if events is not None and self.grid.replica == 0:
            result.update(bubble=bubble_fraction(events, self.pp), bubble_formula=bubble_formula(self.m, self.pp))
            result.update(peak_stashed=[int(a[0]) for a in peaks], dp=self.grid.dp, pp=self.pp)
            lines.append(
                f"pipeline, last training step ({self.args.schedule}, {self.m} micro-batches, {self.pp} stages): "
                f"measured bubble {result['bubble']:.3f} vs (p-1)/(m+p-1) = {result['bubble_formula']:.3f} | "
                f"micro-batches held per stage (peak): {result['peak_stashed']}"
            )
        if self.args.save and self.ctx.rank == 0:
            minidl.save({"model": result["params"], "steps": result["steps"], "parallel": "pipeline"}, self.args.save)
            lines.append(f"dense parameters: {self.args.save}")
        return lines
