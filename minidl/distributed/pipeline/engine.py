"""Layer pipelining: a model cut into p stages on p ranks, micro-batches flowing through them.

Rank s of the pipeline communicator holds stage s (a contiguous run of layers). For each mini-batch
of N examples cut into m micro-batches, stage s runs the forward of micro-batch i on the activation
stage s-1 sent it and sends its output on to stage s+1; the last stage computes the loss; the
backwards run the other way, each stage sending the gradient of its input back. The order of these
ops on each stage is the schedule (``pipeline_schedule``: GPipe or 1F1B). Every stage's parameter
gradients add up over the m micro-batches and the optimizer steps once per mini-batch, so with the
loss of micro-batch i weighted by n_i / N,

    sum_i (n_i / N) * mean loss over micro-batch i  =  mean loss over the mini-batch,

the step is exactly the one a single process takes on the whole mini-batch (up to rounding).

A complete program (``mpiexec -n 4 python train.py``: 4 stages)::

    import minidl.distributed as dist
    from minidl.distributed.pipeline.engine import Pipeline, split_sequential

    comm = dist.init()
    model = make_model()                                   # the same seed on every rank
    stage = split_sequential(model, comm.Get_size(), comm.Get_rank())
    pipe = Pipeline(stage, F.cross_entropy, schedule="1f1b", micro_batches=8, comm=comm)
    opt = optim.SGD(stage.parameters(), lr=0.1)
    for x, y in batches:                                   # stage 0 needs x, the last stage y
        opt.zero_grad()
        loss = pipe.train_step(x, y)                       # the mini-batch loss on the last stage
        opt.step()

Data parallelism on top (dp x pp ranks): ``grid = make_grid(comm, pp)`` splits the world into dp
pipelines of pp stages (``grid.pp_comm``) and, across them, one data-parallel group per stage
(``grid.dp_comm``); wrap the optimizer in ``DistributedOptimizer(..., comm=grid.dp_comm)`` and feed
replica ``grid.replica`` its shard of the global batch.

Messages are buffer-based: an activation goes as a small int64 header (dtype code, ndim, shape) and
then its data, with Isend, so a stage never blocks on a send (1F1B's interleaving would deadlock
with synchronous sends: stage s sending F(i+1) while stage s+1 sends it B(i)'s gradient); the
receiving stage already knows the shape of a gradient (its own output's). Receives go through
``p2p.recv_array``, which also rejects a message of the wrong size. (``p2p.send``/``recv`` put the
messages inside the autograd graph with blocking sends; here the schedule, not backward(), decides
when each message moves, so the pipeline sends and receives plain arrays around the graph.)
The sends of a step are completed at its end. Tags carry the micro-batch (2i for its
activation, 2i + 1 for its gradient), so a mix-up is an error, not a silently wrong number.

Records, per step: ``events`` (``pipeline_schedule.Event`` per op, seconds since the step began,
after a barrier of the pipeline's ranks), ``peak_stashed`` (most micro-batches whose activations were
held at once: m for GPipe, at most p - s for 1F1B on stage s). ``gather_events`` collects all stages'
events on stage 0 for ``plot_schedule`` and ``bubble_fraction``.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import minidl
from minidl.distributed.comm import get_comm
from minidl.distributed.model_parallel.layerwise import stage_ranges
from minidl.distributed.model_parallel.p2p import recv_array
from minidl.distributed.pipeline.schedule import (
    FORWARD,
    Event,
    events_from_array,
    events_to_array,
    schedule,
)
from minidl.distributed.wire import gather_states
from minidl.nn.container import Sequential
from minidl.nn.module import Module
from minidl.tensor import Tensor

# dtypes an activation may have on the wire, by header code
_WIRE_DTYPES = (np.float16, np.float32, np.float64, np.int32, np.int64)
_MAX_NDIM = 8


# ----------------------------------------------------------------------------- cutting a model
def split_sequential(model: Sequential, num_stages: int, stage: int, balance: Any = None) -> Sequential:
    """Stage ``stage``'s layers of ``model``: the same module objects (so the same parameters) under
    the same names (so ``model_parallel.gather_state_dict`` reassembles the dense state dict).

    ``balance`` as in ``model_parallel.stage_ranges``: None (equal numbers of layers, the first stages
    taking the extra ones), or a list of layer counts per stage (GPipe's ``balance``)."""
    if not isinstance(model, Sequential):
        raise TypeError(f"split_sequential: expected an nn.Sequential, got {type(model).__name__}")
    if not 0 <= stage < num_stages:
        raise ValueError(f"split_sequential: stage {stage} out of range for {num_stages} stages")
    part = Sequential()
    for i in stage_ranges(len(model), num_stages, balance)[stage]:
        part.add_module(str(i), model[i])  # the dense model's names: "3.weight" stays "3.weight"
    return part


# ----------------------------------------------------------------------------- messages
def isend_activation(comm: Any, x: np.ndarray, dest: int, tag: int) -> list[Any]:
    """Start sending ``x`` (header, then data); returns the requests (they keep the buffers alive)."""
    x = np.ascontiguousarray(x)
    codes = [i for i, d in enumerate(_WIRE_DTYPES) if x.dtype == d]
    if not codes or x.ndim > _MAX_NDIM:
        raise ValueError(
            f"pipeline: cannot send an activation of dtype {x.dtype} and shape {x.shape} "
            f"(dtypes {[np.dtype(d).name for d in _WIRE_DTYPES]}, at most {_MAX_NDIM} dims)"
        )
    header = np.array([codes[0], x.ndim, *x.shape], dtype=np.int64)
    return [_Pending(comm.Isend(header, dest, tag), header), _Pending(comm.Isend(x, dest, tag), x)]


def recv_activation(comm: Any, source: int, tag: int) -> np.ndarray:
    """Receive an array ``isend_activation`` sent: header first, then the data into a fresh array."""
    header = np.zeros(2 + _MAX_NDIM, dtype=np.int64)
    comm.Recv(header, source, tag)
    code, ndim = int(header[0]), int(header[1])
    if not (0 <= code < len(_WIRE_DTYPES) and 0 <= ndim <= _MAX_NDIM):
        raise ValueError(f"pipeline: rank {source} sent a malformed activation header {header.tolist()} (tag {tag})")
    out = np.empty(tuple(int(n) for n in header[2 : 2 + ndim]), dtype=_WIRE_DTYPES[code])
    return recv_array(comm, out, source, tag, "pipeline activation")


@dataclass
class _Pending:
    request: Any
    buffer: np.ndarray  # must outlive the send


# ----------------------------------------------------------------------------- the pipeline
class Pipeline:
    """This rank's stage of a pipelined model, running GPipe or 1F1B over micro-batches.

    Args:
        module: the stage's layers; called as ``module(x)`` on one Tensor, returning one Tensor.
        loss_fn: ``loss_fn(output, target) -> scalar Tensor``, the *mean* over the micro-batch's
            examples (as ``F.cross_entropy``); used on the last stage only.
        schedule: "gpipe" or "1f1b".
        micro_batches: m, the micro-batches per mini-batch (at most the mini-batch size).
        comm: the pipeline's communicator; rank s holds stage s (default: ``dist.init()``'s).
        batch_axis: the axis of inputs and targets that holds the examples (0; 1 for [T, B] sequences).
    """

    def __init__(
        self,
        module: Module,
        loss_fn: Callable[[Tensor, Any], Tensor] | None = None,
        schedule: str = "1f1b",
        micro_batches: int = 4,
        comm: Any = None,
        batch_axis: int = 0,
    ):
        self.module = module
        self.loss_fn = loss_fn
        self.comm = get_comm(comm)
        self.stage, self.num_stages = self.comm.Get_rank(), self.comm.Get_size()
        self.schedule = schedule
        self.micro_batches = micro_batches
        self.batch_axis = batch_axis
        self.ops = self._ops()  # validates schedule and micro_batches
        if self.is_last and loss_fn is None:
            raise ValueError("Pipeline: the last stage needs a loss_fn")
        self.events: list[Event] = []
        self.peak_stashed = 0

    @property
    def is_first(self) -> bool:
        return self.stage == 0

    @property
    def is_last(self) -> bool:
        return self.stage == self.num_stages - 1

    def _ops(self) -> list[tuple[str, int]]:
        return schedule(self.schedule, self.micro_batches, self.num_stages, self.stage)

    def _split(self, a: Any, what: str) -> list[Any]:
        a = a.data if isinstance(a, Tensor) else np.asarray(a)
        n = a.shape[self.batch_axis] if a.ndim > self.batch_axis else 0
        if n < self.micro_batches:
            raise ValueError(
                f"Pipeline: {what} of shape {a.shape} has {n} examples on axis {self.batch_axis}, "
                f"fewer than micro_batches={self.micro_batches}"
            )
        return np.array_split(a, self.micro_batches, axis=self.batch_axis)

    def train_step(self, inputs: Any = None, targets: Any = None) -> float | None:
        """Forward and backward of one mini-batch through the pipeline, on every stage.

        ``inputs`` (the mini-batch) is needed on the first stage, ``targets`` on the last; other
        stages may pass None. Parameter gradients are *added* to ``.grad`` (zero them before, step the
        optimizer after). Returns the mean loss over the mini-batch on the last stage, else None.
        """
        return self._run(self.ops, inputs, targets, "train_step", record=True)

    def eval_step(self, inputs: Any = None, targets: Any = None) -> float | None:
        """The mini-batch's mean loss (last stage; None elsewhere) from forwards only, under ``no_grad``:
        nothing is stashed and no gradient moves. ``events`` and ``peak_stashed`` keep the last training step's."""
        with minidl.no_grad():
            ops = [(FORWARD, i) for i in range(self.micro_batches)]
            return self._run(ops, inputs, targets, "eval_step", record=False)

    def _run(self, ops: list[tuple[str, int]], inputs: Any, targets: Any, what: str, record: bool) -> float | None:
        if self.is_first and inputs is None:
            raise ValueError(f"Pipeline.{what}: the first stage needs the inputs")
        if self.is_last and targets is None:
            raise ValueError(f"Pipeline.{what}: the last stage needs the targets")
        xs = self._split(inputs, "inputs") if self.is_first else None
        ys = self._split(targets, "targets") if self.is_last else None
        total = sum(y.shape[self.batch_axis] for y in ys) if ys else 0
        prev, nxt = self.stage - 1, self.stage + 1
        stash: dict[int, tuple[Tensor | None, Tensor]] = {}  # micro-batch -> (input, output or weighted loss)
        pending: list[_Pending] = []
        events: list[Event] = []
        peak, loss_sum = 0, 0.0
        self.comm.Barrier()  # every stage's clock starts together
        t0 = time.perf_counter()
        for kind, i in ops:
            if kind == FORWARD:
                if self.is_first:  # data: float inputs as a Tensor, integer ids (an Embedding's) as they are
                    x = minidl.tensor(xs[i]) if xs[i].dtype.kind == "f" else xs[i]
                else:
                    x = recv_activation(self.comm, prev, 2 * i)
                    x = minidl.tensor(x, requires_grad=minidl.is_grad_enabled() and x.dtype.kind == "f")
                start = time.perf_counter()
                out = self.module(x)
                if self.is_last:
                    # weight n_i / N: the micro-batch losses add up to the mini-batch mean
                    out = self.loss_fn(out, ys[i]) * (ys[i].shape[self.batch_axis] / total)
                    loss_sum += float(out.data)
                end = time.perf_counter()
                if not self.is_last:
                    pending += isend_activation(self.comm, out.data, nxt, 2 * i)
                if minidl.is_grad_enabled():  # kept for the backward
                    stash[i] = (x if isinstance(x, Tensor) else None, out)
                    peak = max(peak, len(stash))
            else:
                x, out = stash.pop(i)  # freed after this backward
                grad = None
                if not self.is_last:
                    grad = recv_array(self.comm, np.empty_like(out.data), nxt, 2 * i + 1, "pipeline gradient")
                start = time.perf_counter()
                out.backward(grad)
                end = time.perf_counter()
                if not self.is_first:
                    g = x.grad if x.grad is not None else np.zeros_like(x.data)
                    pending.append(_Pending(self.comm.Isend(np.ascontiguousarray(g), prev, 2 * i + 1), g))
            events.append(Event(self.stage, i, kind, start - t0, end - t0))
        for p in pending:
            p.request.Wait()
        if record:  # the schedule as the last training step ran it (an evaluation does not replace it)
            self.events, self.peak_stashed = events, peak
        return loss_sum if self.is_last else None

    def gather_events(self, root: int = 0) -> list[Event] | None:
        """Every stage's events of the last training step, on pipeline rank ``root`` (None on the others)."""
        gathered = gather_states(events_to_array(self.events), root, self.comm)
        if gathered is None:
            return None
        return sorted((e for a in gathered for e in events_from_array(a)), key=lambda e: (e.stage, e.start))


# ----------------------------------------------------------------------------- data x pipeline parallel
@dataclass
class Grid:
    """This rank's place in a dp x pp grid: world rank = replica * pp + stage.

    ``pp_comm``: the pp ranks of this rank's pipeline (rank = stage); ``dp_comm``: the dp ranks that
    hold the same stage in the dp pipelines (rank = replica), for the gradient allreduce.
    """

    dp: int
    pp: int
    replica: int
    stage: int
    pp_comm: Any
    dp_comm: Any


def make_grid(comm: Any, pp: int) -> Grid:
    """Split ``comm`` (size dp * pp) into dp pipelines of pp stages and pp data-parallel groups."""
    comm = get_comm(comm)
    size, rank = comm.Get_size(), comm.Get_rank()
    if pp < 1 or size % pp:
        raise ValueError(f"make_grid: {size} ranks cannot form pipelines of {pp} stages (pp must divide the size)")
    replica, stage = divmod(rank, pp)
    pp_comm = comm.Split(replica, stage)  # color = which pipeline, key = order within it
    dp_comm = comm.Split(stage, replica)
    return Grid(size // pp, pp, replica, stage, pp_comm, dp_comm)
