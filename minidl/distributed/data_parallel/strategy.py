"""``--parallel data``, ``zero`` and ``local-sgd``: the data-parallel schemes as strategies of the training loop.

- **data** (``DataParallel``): every rank holds the whole model and trains on its own share of each batch. The
  gradients are averaged by ``DistributedOptimizer`` before each update (before clipping, which must see the
  averaged ones), so P ranks with batch b take the steps of one process with batch P*b. The batch size is per
  rank (Horovod's convention, weak scaling).
- **zero** (``ZeroParallel``): the same steps, the optimizer state (stage 1), gradients (2) and parameters (3)
  sharded over the ranks (``ZeroOptimizer``).
- **local-sgd** (``LocalSGD``): every rank steps its own replica; the parameters are averaged every
  ``--average-every`` steps (and once more at the end, with the batch-norm running statistics). No evaluation
  between epochs (the replicas differ); the report gives the bytes every rank sent + received per step, counted
  on the wire (``CountingComm``).
"""

from __future__ import annotations

from typing import Any

import minidl.distributed as dist
from minidl.distributed.counting import sent_and_received
from minidl.distributed.data_parallel.local_sgd import average_buffers
from minidl.distributed.data_parallel.timing import PHASES
from minidl.distributed.strategy import Strategy, reseed_per_rank
from minidl.nn.module import Module


class DataParallel(Strategy):
    """every rank the whole model, gradients averaged over the ranks (Horovod-style)."""

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.shard, self.replicas = (ctx.rank, ctx.size), ctx.size
        self._seen = (dict.fromkeys(PHASES, 0.0), 0)

    def replicate(self, model: Module) -> Module:
        """Every replica starts from rank 0's weights (``--sync-bn``: batch statistics over all ranks), each rank
        with its own dropout stream."""
        if getattr(self.args, "sync_bn", False):
            model = dist.convert_sync_batchnorm(model, self.args.allreduce, self.ctx.comm)
        dist.broadcast_parameters(model, root=0, comm=self.ctx.comm)
        reseed_per_rank(self.args.seed, self.ctx.rank)
        return model

    def build(self, task: Any, model: Module) -> None:
        a = self.args
        super().build(task, self.replicate(model))
        compression = None if a.compression == "none" else a.compression
        if getattr(a, "precision", "fp32") == "fp16":
            compression = "fp16"  # fp16 training sends fp16 gradients: half the bytes
        self.opt = dist.DistributedOptimizer(
            self.base,
            allreduce=a.allreduce,
            fusion_bytes=int(a.fusion_mb * 2**20),
            compression=compression,
            comm=self.ctx.comm,
            overlap=a.overlap,
            overflow="skip" if self.scaler is not None else "raise",  # the loss scaler then backs off
        )
        self.keep_timeline()

    def keep_timeline(self) -> None:
        """``--timeline FILE``: record this rank's steps (the optimizer its allreduces) for a Chrome trace."""
        if self.args.timeline:
            self.timeline = self.opt.timeline = dist.Timeline(self.ctx.comm)

    def finish(self) -> None:
        super().finish()
        if self.timeline is not None:
            self.timeline.write(self.args.timeline)

    def describe(self) -> list[str]:
        overlap = ", buckets allreduced during backward" if self.args.overlap else ""
        return [f"data parallel: {self.ctx.size} ranks, allreduce={self.ctx.algorithm}{overlap}"]

    def clip(self, max_norm: float | None) -> None:
        if max_norm:
            self.opt.synchronize()  # average across ranks now: the clipping norm is the global gradient's
        super().clip(max_norm)

    def timings(self) -> dict[str, float] | None:
        t, (before, steps) = self.opt.timings, self._seen
        n = t.steps - steps
        self._seen = (dict(t.total), t.steps)
        return {k: (t.total[k] - before[k]) / n for k in PHASES} if n else None

    def restart_clocks(self) -> None:
        self.opt.timings.restart()  # evaluation and checkpoints are not a step's time

    def report(self, result: dict[str, Any]) -> list[str]:
        lines = [f"step time, {self.opt.timings.summary()}"] if self.opt.timings.steps else []
        return lines + super().report(result)


class ZeroParallel(DataParallel):
    """data parallelism with the model's state sharded over the ranks (ZeRO stage 1, 2 or 3)."""

    def build(self, task: Any, model: Module) -> None:
        Strategy.build(self, task, self.replicate(model))
        self.stage = self.args.zero_stage or 1
        self.opt = dist.ZeroOptimizer(self.base, stage=self.stage, module=self.net, comm=self.ctx.comm)  # its units
        self.keep_timeline()

    def describe(self) -> list[str]:
        held = self.opt.memory_bytes()
        mb = ", ".join(f"{k.replace('_', ' ')} {v / 2**20:.2f} MiB" for k, v in held.items())
        return [
            f"ZeRO stage {self.stage}: {self.ctx.size} ranks (ring reduce-scatter and allgather); rank 0 holds {mb}"
        ]

    def clip(self, max_norm: float | None) -> None:
        if max_norm:
            self.opt.clip_grad_norm(max_norm)  # the shards' squared norms added over the ranks


class LocalSGD(Strategy):
    """every rank steps alone, the parameters averaged every k steps."""

    servers = 0
    evaluates_each_epoch = False

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.counted = dist.CountingComm(ctx.comm)
        self.workers, worker = ctx.size - self.servers, ctx.rank - self.servers
        self.shard, self.replicas, self.log_rank = (max(worker, 0), self.workers), self.workers, self.servers
        self.serves = worker < 0
        self.stats: Any = None

    def build(self, task: Any, model: Module) -> None:
        dist.broadcast_parameters(model, comm=self.ctx.comm)
        reseed_per_rank(self.args.seed, self.ctx.rank)
        super().build(task, model)
        self.opt = dist.LocalSGD(self.base, self.args.average_every, comm=self.counted, allreduce=self.args.allreduce)

    def describe(self) -> list[str]:
        return [f"local SGD: {self.workers} ranks, parameters averaged every {self.args.average_every} steps"]

    def finish(self) -> None:
        if not self.serves:
            self.opt.finish()
        self.traffic = sent_and_received(self.counted.traffic_matrix())  # (sent, received) bytes per rank
        self.collect()

    def collect(self) -> None:
        """Leave the final model on every rank."""
        average_buffers(self.model, self.ctx.comm, self.args.allreduce)

    def report(self, result: dict[str, Any]) -> list[str]:
        result["bytes_per_step"] = (self.traffic[0] + self.traffic[1]) / max(result["steps"], 1)
        lines = [
            "KiB sent + received per step: "
            + ", ".join(
                f"rank {r}{' (server)' if r < self.servers else ''} {b / 1024:,.1f}"
                for r, b in enumerate(result["bytes_per_step"])
            )
        ]
        return lines + self.staleness(result)

    def staleness(self, result: dict[str, Any]) -> list[str]:
        return []
