"""Layer-wise model parallelism: consecutive layers of one network on consecutive ranks.

Rank r holds stage r, a contiguous block of the layers, and only its parameters (and an optimizer
over them): the model no longer has to fit in one process's memory (Justus, "High performance computing for AI", 2018: model parallelism
"can process larger models since only a subset of the weights has to be stored on a single worker").
A training step is one forward sweep from rank 0 to rank P-1 and one backward sweep back, with
``minidl.distributed.p2p``'s differentiable send/recv at each boundary:

    rank 0        rank 1            ...   rank P-1
    x -> f_0 --send y_0--> f_1 --send y_1--> ... f_{P-1} -> loss
    token <--dL/dy_0---- token <--dL/dy_1--- ... loss.backward()

Each rank's ``stage(...)`` returns the loss's input on the last rank and a 0-d send token on the
others; every rank then calls ``.backward()`` on what it has (the loss, or the token) and steps its own
optimizer. The result is the same step a single process takes with the whole model (the tests check
parameters after k SGD steps to 1e-8 in float64). Only one rank computes at a time: this is the
memory win without the speed win; ``minidl.distributed.pipeline`` keeps the ranks busy with micro-batches.

Communication per step, per boundary: one header (80 bytes) and the activation forward, the same
number of bytes of gradient backward (``boundary_bytes``). Compare data parallelism, which moves
about 2x the whole gradient per rank per step in a ring allreduce.

``SequentialStage`` cuts a chain of units into P contiguous blocks: an ``nn.Sequential``, or a model's
``units()`` (the LSTM language model's [embedding, LSTM layer 0, ..., LSTM layer L-1, decoder], each
LSTM unit carrying its own state; the ResNet's stem, blocks and head). Pipeline and tensor parallelism
cut the same lists. ``gather_state_dict`` reassembles the dense ``state_dict`` on one rank, under the
model's own names when given the units' names (checkpoints, tests).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import allreduce
from minidl.distributed.model_parallel.p2p import StageBoundary
from minidl.distributed.wire import gather_states
from minidl.nn.container import Sequential
from minidl.nn.module import Module
from minidl.tensor import Tensor

HEADER_BYTES = 80  # p2p.send_meta: 10 int64 words


# ----------------------------------------------------------------------------- partitioning
def partition(costs: Sequence[float], parts: int) -> list[range]:
    """Split items 0..n-1 into ``parts`` contiguous non-empty blocks minimizing the largest block's cost.

    The linear-partition dynamic program: best[k][i] = min over j of max(best[k-1][j], cost(j..i)),
    O(parts * n^2), for the handful of layers a model has. Ties go to earlier cuts.
    """
    n = len(costs)
    if parts < 1 or parts > n:
        raise ValueError(
            f"partition: cannot split {n} layers into {parts} non-empty stages "
            f"(model parallelism needs at most one rank per layer)"
        )
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(costs, dtype=np.float64))])
    inf = float("inf")
    best = np.full((parts + 1, n + 1), inf)
    cut = np.zeros((parts + 1, n + 1), dtype=np.int64)
    best[0][0] = 0.0
    for k in range(1, parts + 1):
        for i in range(k, n + 1):
            for j in range(k - 1, i):
                value = max(best[k - 1][j], prefix[i] - prefix[j])
                if value < best[k][i]:
                    best[k][i], cut[k][i] = value, j
    bounds, i = [], n
    for k in range(parts, 0, -1):
        bounds.append(range(int(cut[k][i]), i))
        i = int(cut[k][i])
    return bounds[::-1]


def stage_ranges(
    n: int, parts: int, balance: Sequence[int] | Sequence[float] | str | None, costs: Sequence[float] | None = None
) -> list[range]:
    """The layer ranges of the stages: ``balance`` = None (equal numbers of layers), a list of layer
    counts per stage (GPipe's ``balance``), or "parameters" (balance ``costs``, the parameter counts)."""
    if balance is None:
        if parts > n:
            partition([1.0] * n, parts)  # raises the clear error
        edges = np.cumsum([0] + [len(a) for a in np.array_split(np.arange(n), parts)])
        return [range(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]
    if isinstance(balance, str):
        if balance != "parameters" or costs is None:
            raise ValueError(f"balance must be None, a list of layer counts or 'parameters', got {balance!r}")
        return partition([c + 1.0 for c in costs], parts)  # +1: a layer without parameters still costs time
    counts = [int(c) for c in balance]
    if len(counts) != parts or min(counts) < 1 or sum(counts) != n:
        raise ValueError(f"balance {list(balance)} must give {parts} positive layer counts summing to {n}")
    edges = np.cumsum([0] + counts)
    return [range(int(a), int(b)) for a, b in zip(edges[:-1], edges[1:])]


def boundary_bytes(activation_shape: Sequence[int], itemsize: int) -> int:
    """Bytes one stage boundary moves per step: the header and activation forward, the gradient back."""
    return HEADER_BYTES + 2 * int(np.prod(activation_shape)) * itemsize


class _Stage(Module):
    """What both splits share: this rank's place in the chain (``boundary``: its two neighbours)."""

    def _join(self, comm: Any, tag: int) -> int:
        """Set ``comm`` and ``boundary`` (rank r - 1 -> r -> r + 1); returns the number of ranks."""
        self.comm = get_comm(comm)
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        self.boundary = StageBoundary(
            self.comm, rank - 1 if rank > 0 else None, rank + 1 if rank < size - 1 else None, tag
        )
        return size

    @property
    def is_first(self) -> bool:
        return self.boundary.prev is None

    @property
    def is_last(self) -> bool:
        return self.boundary.next is None


# ----------------------------------------------------------------------------- Sequential
class SequentialStage(_Stage):
    """This rank's block of an ``nn.Sequential`` split over the ranks of ``comm`` (rank r = stage r).

    ``forward(x)``: on rank 0, x is the model's input; on the other ranks x is ignored (pass None) and
    the input arrives from rank r-1. Returns the model's output on the last rank, a 0-d send token on
    the others. Then ``result.backward()`` on every rank (the loss on the last one).

    Build the same Sequential on every rank (the same seed); each stage keeps references to its own
    layers only. ``balance``: see ``stage_ranges``. Parameter names are the Sequential's own ("3.weight").
    """

    def __init__(self, model: Sequential | list, comm: Any = None, balance: Any = None, tag: int = 0):
        super().__init__()
        if isinstance(model, list):  # a model's units(): (name, unit) pairs
            model = Sequential(*(unit for _, unit in model))
        if not isinstance(model, Sequential):
            raise TypeError(f"SequentialStage: expected an nn.Sequential or units, got {type(model).__name__}")
        size = self._join(comm, tag)
        layers = list(model)
        costs = [sum(p.data.size for p in m.parameters()) for m in layers]
        self.ranges = stage_ranges(len(layers), size, balance, costs)
        self.layer_range = self.ranges[self.comm.Get_rank()]
        for i in self.layer_range:
            self.add_module(str(i), layers[i])

    def forward(self, x: Any = None) -> Tensor:
        if self.is_first:
            if x is None:
                raise ValueError("SequentialStage: the first stage needs the model's input")
            h = x
        else:
            h = self.boundary.receive()
        for layer in self._modules.values():
            h = layer(h)
        return h if self.is_last else self.boundary.send(h)

    def extra_repr(self) -> str:
        r = self.layer_range
        return f"layers {r.start}..{r.stop - 1} on rank {self.comm.Get_rank()} of {self.comm.Get_size()}"


# ----------------------------------------------------------------------------- whole-model helpers
def dense_names(state: dict[str, Any], names: Sequence[str]) -> dict[str, Any]:
    """Keys ``"i.k"`` of a chain of units -> the model's ``"names[i].k"`` (``k`` alone where names[i] is "")."""
    out = {}
    for key, value in state.items():
        i, _, rest = key.partition(".")
        out[f"{names[int(i)]}.{rest}" if names[int(i)] else rest] = value
    return out


def gather_state_dict(
    stage: Module, root: int = 0, comm: Any = None, names: Sequence[str] | None = None
) -> dict[str, np.ndarray] | None:
    """The dense model's ``state_dict`` assembled from every stage's, on ``root`` (None elsewhere).

    ``names``: the units' names (``[n for n, _ in model.units()]``), to give the model's own names back;
    without them, the stages' names are kept. A name held by several ranks (a replicated parameter) is
    taken from the lowest rank.
    """
    comm = get_comm(comm if comm is not None else getattr(stage, "comm", None))
    state = {k: np.asarray(v) for k, v in stage.state_dict().items()}
    parts = gather_states(dense_names(state, names) if names is not None else state, root, comm)
    if parts is None:
        return None
    merged: dict[str, np.ndarray] = {}
    for part in parts:
        for k, v in part.items():
            merged.setdefault(k, v)
    return merged


def clip_grad_norm_split(
    params: Iterable[Tensor],
    max_norm: float,
    comm: Any = None,
    replicated: Iterable[Tensor] = (),
    algorithm: str = "ring",
) -> float:
    """Clip to a joint L2 norm over a model split across ranks; returns the norm before clipping.

    ``params``: the gradients only this rank holds (a stage's, a shard's); ``replicated``: ones every
    rank holds with the same gradient (counted once). total^2 = allreduce(sum of this rank's squared
    norms), then every gradient is scaled by max_norm / (total + 1e-6) if that is below 1, as
    ``optim.clip_grad_norm`` does for one process.
    """
    comm = get_comm(comm)
    own = [p.grad for p in params if p.grad is not None]
    rep = [p.grad for p in replicated if p.grad is not None]
    local = sum(float(np.sum(np.square(g, dtype=np.float64))) for g in own)
    if comm.Get_rank() == 0:
        local += sum(float(np.sum(np.square(g, dtype=np.float64))) for g in rep)
    total = float(np.sqrt(allreduce(comm, np.array([local]), algorithm, "sum")[0]))
    coef = max_norm / (total + 1e-6)
    if not coef >= 1.0:  # also when total is NaN, as optim.clip_grad_norm (and PyTorch) do
        for g in own + rep:
            g *= coef
    return total
