"""``--parallel pipeline``: the model's units cut into stages, each batch cut into micro-batches (GPipe or 1F1B).

The ``units()`` chain (the LM's embedding, LSTM layers, decoder) is cut into ``--pipeline-stages``
contiguous blocks (default: every rank a stage); with fewer stages than ranks, the ranks form dp = P / pp
pipelines (``make_grid``) that each take their own share of the data and average gradients within each
stage's data-parallel group. Each window of B streams is cut into m micro-batches of streams; every
LSTM unit keeps the state of each micro-batch across windows (truncated BPTT). Gradients are clipped to
the joint global norm over the stages, so the run takes the steps of ``--parallel none`` with dp * B
streams (the tests check 1e-8 in float64). The report gives the bubble measured on the last training
step against (p-1)/(m+p-1), and the most micro-batches whose activations each stage held at once in it.
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl.distributed as dist
from minidl.distributed.model_parallel.layerwise import clip_grad_norm_split, gather_state_dict, stage_ranges
from minidl.distributed.model_parallel.strategy import ModelParallel
from minidl.distributed.pipeline.schedule import bubble_formula, bubble_fraction
from minidl.nn.container import Sequential
from minidl.nn.module import Module


class PipelineParallel(ModelParallel):
    """stages of units over micro-batches, GPipe or 1F1B."""

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.pp, self.m = args.pipeline_stages or ctx.size, args.micro_batches
        self.grid = dist.make_grid(ctx.comm, self.pp)
        self.shard = self.eval_share = (self.grid.replica, self.grid.dp)
        self.replicas, self.min_streams = self.grid.dp, self.m

    def build(self, task: Any, model: Module) -> None:
        units, B = task.chain(model), task.cfg.batch_size
        if self.pp > len(units):
            raise ValueError(f"--parallel pipeline: {self.pp} stages but the model has only {len(units)} units")
        if not 1 <= self.m <= B:
            raise ValueError(f"--micro-batches must be between 1 and the streams per pipeline ({B}), got {self.m}")
        self.units, self.names = stage_ranges(len(units), self.pp, None)[self.grid.stage], [n for n, _ in units]
        self.net = Sequential()
        for i in self.units:  # the units keep their place in the chain as their name: dense names come back
            self.net.add_module(str(i), units[i][1])
        task.set_slots(self.m)
        loss = lambda out, y: task.criterion(out, (None, y))  # the micro-batch's mean loss
        self.pipe = dist.Pipeline(self.net, loss, self.args.schedule, self.m, self.grid.pp_comm, batch_axis=1)
        self.params, self.reports = list(self.net.parameters()), self.pipe.is_last
        self.base = self.opt = task.optimizer(self.params)
        if self.grid.dp > 1:
            self.opt = dist.DistributedOptimizer(self.base, allreduce=self.args.allreduce, comm=self.grid.dp_comm)

    def describe(self) -> list[str]:
        u, g = self.units, self.grid
        return [
            f"pipelined: {self.pp} stages x {g.dp} data-parallel, schedule {self.args.schedule}, {self.m} micro-batches "
            f"per window; rank 0 holds units {u.start}..{u.stop - 1} of {len(self.names)}"
        ]

    def train_step(self, task: Any, batch: Any) -> float | None:
        task.start_window()
        self.opt.zero_grad()
        mean = self.pipe.train_step(*batch)
        if self.grid.dp > 1:
            self.opt.synchronize()  # average over the replicas of this stage before clipping
        clip_grad_norm_split(self.params, task.max_grad_norm, self.grid.pp_comm, algorithm=self.args.allreduce)
        self.opt.step()
        return mean

    def eval_loss(self, task: Any, batch: Any) -> tuple[Any, float | None]:
        task.start_window()
        return None, self.pipe.eval_step(*batch)

    def suffix(self) -> str:
        return ""

    def dense_params(self) -> dict[str, np.ndarray] | None:
        g = self.grid
        state = gather_state_dict(self.net, 0, g.pp_comm, self.names) if g.replica == 0 else None
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
        return lines + self.save_dense(result)
