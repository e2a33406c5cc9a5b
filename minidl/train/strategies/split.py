"""``--parallel model`` and ``--parallel tensor``: one model split over the ranks, every rank on the same batch.

``--batch-size`` is the whole batch and each rank holds part of the model, so P ranks take exactly the
steps one process takes (the tests check the parameters to 1e-8 in float64).

- **model** (``minidl.distributed.model_parallel.layerwise``): rank r holds a contiguous block of the
  model's units (LM: embedding, each LSTM layer, decoder; ResNet: stem conv, bn, relu, each block, pool,
  flatten, fc, balanced by parameter count). Activations go forward and gradients back through
  differentiable send/recv; one rank computes at a time.
- **tensor** (``minidl.distributed.model_parallel.tensor_parallel``, Megatron-style): the last unit is
  split by output (the LM's [V, H] decoder and its softmax by vocabulary; the ResNet's classifier by
  class); the units before it are replicated, the same computation on every rank.

Every message is counted (``CountingComm``): the progress lines and the report give the bytes each rank
sent per step, the number to compare with ``--parallel data``'s gradient allreduce. ``--save`` writes the
dense model's parameters at the end (``minidl.save`` of {"model", "steps", "parallel"}, on rank 0).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from minidl import nn
from minidl.distributed.model_parallel import layerwise as mp
from minidl.distributed.model_parallel import tensor_parallel as tp
from minidl.nn.module import Module
from minidl.train.strategies.base import Strategy


def resnet_units(model: nn.ResNet) -> tuple[nn.Sequential, list[str]]:
    """The ResNet as a chain of units and each unit's name in it (``"layer2.0"``), to map back to dense names."""
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


class ModelParallel(Strategy):
    """consecutive units of the model on consecutive ranks."""

    refuses = ("--resume", "--compression", "--sync-bn")

    def __init__(self, ctx: Any, args: Any):
        super().__init__(ctx, args)
        self.counted = dist.CountingComm(ctx.comm)
        self.algorithm = "ring" if ctx.algorithm == "mpi" else ctx.algorithm  # MPI's own allreduce goes uncounted
        self.eval_share = (0, 1)  # every rank sees the whole batch
        self.steps = self.window = 0
        self.bytes = 0

    def build(self, task: Any, model: Module) -> None:
        self.task, self.n_params = task.name, sum(p.data.size for p in model.parameters())
        self.split(task, model)
        self.params = list(self.net.parameters())
        self.base = self.opt = task.optimizer(self.own + self.replicated)

    def split(self, task: Any, model: Module) -> None:
        if task.name == "lm":
            self.net: Any = mp.LMStage(model, self.counted)
        else:
            seq, self.names = resnet_units(model)
            self.net = mp.SequentialStage(seq, self.counted, balance="parameters")
        self.own, self.replicated, self.reports = list(self.net.parameters()), [], self.net.is_last

    def describe(self) -> list[str]:
        held = sum(p.data.size for p in self.own + self.replicated)
        return [
            f"{self.args.parallel} parallel over {self.ctx.size} ranks: rank 0 holds {held:,} parameters ({self.detail()})"
        ]

    def detail(self) -> str:
        return repr(self.net).splitlines()[0]

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
        if self.task == "lm":
            return mp.gather_state_dict(self.net, comm=self.ctx.comm)
        state = mp.gather_state_dict(self.net, comm=self.ctx.comm)
        if state is None:
            return None
        return {f"{self.names[int(k.split('.', 1)[0])]}.{k.split('.', 1)[1]}": v for k, v in state.items()}

    def checkpoint(self, task: Any, pos: Any, preset: str, final: bool) -> None:
        """Only the dense parameters, at the end (``report``)."""

    def report(self, result: dict[str, Any]) -> list[str]:
        self.bytes += self.counted.reset()[1]
        mine = np.zeros(self.ctx.size)
        mine[self.ctx.rank] = self.bytes / max(self.steps, 1)
        per_rank = result["bytes_per_step"] = self.ctx.sum(mine)
        lines = [
            "bytes sent per step: "
            + ", ".join(f"rank {r} {b / 1024:,.1f} KiB" for r, b in enumerate(per_rank))
            + f" | total {per_rank.sum() / 1024:,.1f} KiB"
        ]
        if self.args.save and self.ctx.rank == 0:
            minidl.save(
                {"model": result["params"], "steps": result["steps"], "parallel": self.args.parallel}, self.args.save
            )
            lines.append(f"dense parameters: {self.args.save}")
        return lines


class TensorParallel(ModelParallel):
    """the last layer split by output over the ranks (Megatron-style)."""

    def split(self, task: Any, model: Module) -> None:
        if task.name == "lm":
            self.net = tp.TensorParallelLM(model, self.counted, self.algorithm)
            self.own, self.replicated = self.net.sharded_parameters(), self.net.replicated_parameters()
        else:
            model.fc = tp.ColumnParallelLinear.from_dense(
                model.fc, gather_output=True, comm=self.counted, algorithm=self.algorithm
            )
            self.net, self.own, self.replicated = model, list(model.parameters()), []
        self.reports = self.ctx.rank == 0

    def detail(self) -> str:
        return (
            f"{'decoder split by vocabulary' if self.task == 'lm' else 'fc split by class'}, allreduce {self.algorithm}"
        )

    def criterion(self, task: Any, out: Any, batch: Any) -> Any:
        return self.net.loss(out, batch[1]) if self.task == "lm" else task.criterion(out, batch)

    def dense_params(self) -> dict[str, np.ndarray] | None:
        if self.task == "lm":
            state = self.net.dense_state_dict()
        else:
            state = {k: v for k, v in self.net.state_dict().items() if not k.startswith("fc.")}
            state["fc.weight"], state["fc.bias"] = tp.gather_linear(self.net.fc)
        return state if self.ctx.rank == 0 else None
