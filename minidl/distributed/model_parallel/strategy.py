"""``--parallel model`` and ``--parallel tensor``: one model split over the ranks, every rank on the same batch.

``--batch-size`` is the whole batch and each rank holds part of the model, so P ranks take exactly the
steps one process takes (the tests check the parameters to 1e-8 in float64). Both cut the model's
``units()`` (the LM's embedding, LSTM layers and decoder; the ResNet's stem, blocks and head):

- **model** (``layerwise.SequentialStage``): rank r holds a contiguous block of units, balanced by
  parameter count; activations go forward and gradients back through differentiable send/recv.
- **tensor** (``tensor_parallel.shard_last_unit``, Megatron-style): the last unit's Linear is split by
  output (the LM's [V, H] decoder and its softmax by vocabulary; the ResNet's classifier by class); the
  units before it are replicated, the same computation on every rank.

Every message is counted (``CountingComm``): the progress lines and the report give the bytes each rank
sent per step, the number to compare with ``--parallel data``'s gradient allreduce. ``--save`` writes the
dense model's parameters at the end (``minidl.save`` of {"model", "steps", "parallel"}, on rank 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import tensor_parallel as tp
from minidl.distributed.strategy import Strategy
from minidl.nn.container import Sequential
from minidl.nn.module import Module


class ModelParallel(Strategy):
    """consecutive units of the model on consecutive ranks."""

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.counted = dist.CountingComm(ctx.comm)
        self.algorithm = "ring" if ctx.algorithm == "mpi" else ctx.algorithm  # MPI's own allreduce goes uncounted
        self.eval_share = (0, 1)  # every rank sees the whole batch
        self.steps = self.window = self.bytes = 0

    def build(self, task: Any, model: Module) -> None:
        units = self.split(task, task.chain(model))
        self.names, self.params = [n for n, _ in units], self.own + self.replicated
        self.base = self.opt = task.optimizer(self.params)

    def split(self, task: Any, units: list) -> list:
        self.net = mp.SequentialStage(units, self.counted, balance="parameters")
        self.own, self.replicated, self.reports = list(self.net.parameters()), [], self.net.is_last
        return units

    def describe(self) -> list[str]:
        held = sum(p.data.size for p in self.params)
        mode, size = self.args.parallel, self.ctx.size
        return [f"{mode} parallel over {size} ranks: rank 0 holds {held:,} parameters ({self.detail()})"]

    def detail(self) -> str:
        r = self.net.layer_range
        return f"units {r.start}..{r.stop - 1} of {len(self.names)}"

    def criterion(self, task: Any, out: Any, batch: Any) -> Any:
        return task.criterion(out, batch) if self.net.is_last else None

    def update(self, task: Any, batch: Any) -> None:
        self.steps, self.window = self.steps + 1, self.window + 1
        self.opt.step()

    def clip(self, max_norm: float | None) -> None:
        if max_norm:
            mp.clip_grad_norm_split(self.own, max_norm, self.counted, self.replicated, self.algorithm)

    def suffix(self) -> str:
        _, nbytes = self.counted.reset()
        self.bytes += nbytes
        per_step, self.window = nbytes / max(self.window, 1), 0
        return f" | sent {per_step / 1024:,.1f} KiB/step (rank {self.ctx.rank})"

    def dense_params(self) -> dict[str, np.ndarray] | None:
        return mp.gather_state_dict(self.net, comm=self.ctx.comm, names=self.names)

    def checkpoint(self, task: Any, pos: Any, preset: str, final: bool, path: str | None = None) -> None:
        """Only the dense parameters, at the end (``report``)."""

    def report(self, result: dict[str, Any]) -> list[str]:
        self.bytes += self.counted.reset()[1]
        mine = np.zeros(self.ctx.size)
        mine[self.ctx.rank] = self.bytes / max(self.steps, 1)
        per_rank = result["bytes_per_step"] = self.ctx.sum(mine)
        sent = ", ".join(f"rank {r} {b / 1024:,.1f} KiB" for r, b in enumerate(per_rank))
        return [f"bytes sent per step: {sent} | total {per_rank.sum() / 1024:,.1f} KiB", *self.save_dense(result)]

    def save_dense(self, result: dict[str, Any]) -> list[str]:
        """``--save``: the dense model's parameters (gathered on rank 0), with the steps and the mode."""
        if not self.args.save or self.ctx.rank != 0:
            return []
        minidl.save(
            {"model": result["params"], "steps": result["steps"], "parallel": self.args.parallel}, self.args.save
        )
        return [f"dense parameters: {self.args.save}"]


class TensorParallel(ModelParallel):
    """the last layer split by output over the ranks (Megatron-style)."""

    def split(self, task: Any, units: list) -> list:
        gather = not task.split_softmax  # the LM's logits stay split by vocabulary, into the parallel softmax
        units, self.layer, self.layer_name = tp.shard_last_unit(units, gather, self.counted, self.algorithm)
        self.net, self.reports = Sequential(*(u for _, u in units)), self.ctx.rank == 0
        self.own = list(self.layer.parameters())
        self.replicated = [p for p in self.net.parameters() if all(p is not q for q in self.own)]
        return units

    def detail(self) -> str:
        return f"{self.layer_name} split by output, allreduce {self.algorithm}"

    def criterion(self, task: Any, out: Any, batch: Any) -> Any:
        if not task.split_softmax:
            return task.criterion(out, batch)
        d = self.layer
        return tp.vocab_parallel_cross_entropy(
            out, batch[1].reshape(-1), d.out_range.start, d.comm, d.algorithm, d.check
        )

    def dense_params(self) -> dict[str, np.ndarray] | None:
        state = mp.dense_names({k: np.asarray(v) for k, v in self.net.state_dict().items()}, self.names)
        state = {k: v for k, v in state.items() if not k.startswith(f"{self.layer_name}.")}
        state[f"{self.layer_name}.weight"], state[f"{self.layer_name}.bias"] = tp.gather_linear(self.layer)
        return state if self.ctx.rank == 0 else None
