"""ZeRO: data parallelism that stops every rank from holding everything.

Rajbhandari, Rasley, Ruwase & He, "ZeRO: Memory Optimizations Toward Training Trillion Parameter
Models" (2020). Plain data parallelism keeps on each of P ranks the Psi parameters, their Psi gradients
and K*Psi values of optimizer state (K = 1 for SGD with momentum, 2 for Adam). ZeRO cuts the flat
vector of all of them into P contiguous shards, shard r owned by rank r (the blocks of a ring
reduce-scatter: np.array_split), and keeps on each rank only:

    stage 1 (P_os)        the optimizer state of its shard          values per rank: 2 Psi + K Psi / P
    stage 2 (P_os+g)      ... and the gradient of its shard                          Psi + (1 + K) Psi / P
    stage 3 (P_os+g+p)    ... and the parameters of its shard                        (2 + K) Psi / P
    plain data parallelism                                                           (2 + K) Psi

One step: backward gives every rank its full local gradient; a ring reduce-scatter (the first half of
a ring allreduce) leaves on rank r the sum of shard r; rank r scales it to the average and updates
shard r with the wrapped optimizer (whose state is therefore shard-sized); then, in stages 1 and 2, a
ring allgather (the allreduce's second half) brings every updated shard to every rank. Each rank sends
2 Psi (P - 1) / P values, the same as an allreduce. Stage 2 differs from stage 1 only in dropping the
full gradient as soon as it is reduce-scattered. In stage 3 the parameters stay sharded between steps:
each unit (a child of a Sequential of units, as the trainer runs a model; else each module that owns
parameters) allgathers its parameters just before its forward
and releases them after, Psi (P - 1) / P more values per rank per forward.

The reduce-scatter is the one inside the ring allreduce and the update is elementwise (SGD, momentum,
Nesterov, weight decay, Adam, AdamW), so every stage ends bitwise where ``DistributedOptimizer`` with
``allreduce="ring"`` and one fusion bucket ends. Clipping by global norm needs the norm of the whole
gradient: ``clip_grad_norm`` adds the shards' squared norms with one allreduce of a scalar (another
summation order: equal to 1e-12 in float64, not bitwise). LARS and LAMB scale each layer by its own
norms, which a shard does not hold: they are refused.

What minidl's autograd cannot do: ops keep the arrays they saved for backward, so in stage 3 a unit's
gathered parameters live until backward has used them (the real ZeRO-3 gathers them again for the
backward); between steps, and in evaluation after each forward, a rank holds only its shard.

    opt = dist.ZeroOptimizer(optim.Adam(model.parameters(), lr=1e-3), stage=2, module=model)
    for x, y in batches:
        opt.zero_grad(); loss_fn(model(x), y).backward()
        opt.synchronize(); opt.clip_grad_norm(5.0)     # optional
        opt.step()
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

import collectives
from collectives.algorithms import ring
from collectives.common import block_bounds
from minidl.distributed import lockstep
from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.fusion import Bucket, pack, plan_buckets
from minidl.distributed.data_parallel.timing import StepTimings
from minidl.distributed.fingerprint import check_layout, optimizer_rows, parameter_rows
from minidl.nn.container import Sequential
from minidl.nn.module import Module, Parameter
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor

ELEMENTWISE = ("SGD", "Adam", "AdamW")  # updates in which each element depends only on itself
STAGES = (1, 2, 3)


class ZeroOptimizer:
    """Sharded data parallelism, ZeRO stage 1, 2 or 3, around an elementwise optimizer.

    Args:
        optimizer: SGD, Adam or AdamW over the model's parameters (one dtype); its hyperparameters and
            groups are used, its per-parameter state is replaced by state for this rank's shard.
        stage: 1 (shard the optimizer state), 2 (+ gradients) or 3 (+ parameters).
        module: the model; needed for stage 3, whose units gather their parameters around each forward.
        comm: the communicator (default: the one from ``dist.init()``).
    """

    def __init__(self, optimizer: Optimizer, stage: int = 1, module: Module | None = None, comm: Any = None):
        if stage not in STAGES:
            raise ValueError(f"ZeRO stage must be 1, 2 or 3, got {stage!r}")
        if type(optimizer).__name__ not in ELEMENTWISE:
            raise ValueError(
                f"not supported: ZeRO with {type(optimizer).__name__}; a shard holds no whole layer, so only "
                f"elementwise updates ({', '.join(ELEMENTWISE)}) can run on it"
            )
        if stage == 3 and module is None:
            raise ValueError("ZeRO stage 3 needs module=model: its units gather their parameters for each forward")
        self.optimizer, self.stage, self.comm = optimizer, stage, get_comm(comm)
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        if len({p.data.dtype for p in self.params}) != 1:
            raise ValueError("not supported: ZeRO over parameters of several dtypes (one flat vector per dtype)")
        # same parameters (names when module is given), optimizer and stage on every rank, before any sharding
        names = {id(p): n for n, p in module.named_parameters()} if module is not None else {}
        rows = parameter_rows((names.get(id(p)), p) for p in self.params) + optimizer_rows(optimizer)
        check_layout(self.comm, rows, "ZeroOptimizer", [("stage", stage, int)])
        # The packed layout of DistributedOptimizer's single fusion bucket (parameters in reverse order of the
        # forward, then presence flags), so that the reduce-scatter adds each element as its allreduce does.
        (self.bucket,) = plan_buckets(reversed(self.params), fusion_bytes=2**62)
        rank, size = self.comm.Get_rank(), self.comm.Get_size()
        self.updates = 0  # optimizer steps taken, agreed on with every rank before each exchange (lockstep.py)
        if size > 1:
            lockstep.track(self.comm, self)
        self.bounds = block_bounds(self.bucket.length, size)
        self.lo, self.hi = self.bounds[rank], min(self.bounds[rank + 1], self.bucket.numel)
        self.hi = max(self.hi, self.lo)
        flat = _flatten(self.params, self.bucket)
        if stage < 3:  # the parameters become views of one flat vector; the shard is a view of it too
            self.flat = flat
            for p, start in zip(self.bucket.params, self.bucket.offsets):
                p.data = flat[start : start + p.data.size].reshape(p.data.shape)
            self.shard = flat[self.lo : self.hi]
        else:
            self.shard = flat[self.lo : self.hi].copy()  # all this rank keeps of the parameters
        self.inner = _shard_optimizer(optimizer, self.bucket, self.shard, self.lo, self.hi)
        self.timings = StepTimings()
        self._synchronized = False
        self._units = _units(module) if stage == 3 else []
        self._gathered: set[int] = set()
        if stage == 3:
            for unit in self._units:
                _wrap_forward(unit, self)
            self.release(self.params)

    # -- the Optimizer protocol shared with DistributedOptimizer, PSWorker, LocalSGD
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        """The wrapped optimizer's groups: an LR schedule changes ``lr`` here, the shard's update follows."""
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            p.grad = None

    def synchronize(self) -> None:
        """Reduce-scatter the gradients: afterwards ``self.grad`` is this rank's shard of their average."""
        if self._synchronized:
            return
        if self.stage == 3:
            self._check_gathered()
        start = self.timings.mark()
        size = self.comm.Get_size()
        flat = pack(self.bucket)  # gradients (zeros where None) + presence flags, as DistributedOptimizer packs
        if size == 1:
            summed = flat[self.lo : self.hi].copy()
        else:
            lockstep.agree_on_step(self.comm, self.updates)  # ranks at another step raise here, on every rank
            summed = collectives.reduce_scatter(self.comm, flat, op="sum", algorithm="ring")[: self.hi - self.lo]
        self.grad = np.multiply(summed, 1.0 / size) if size > 1 else summed
        if self.stage >= 2:
            self.zero_grad()  # the full gradients go: only the shard's average is kept
        self.timings.add("communication", _elapsed(start))
        self.timings.restart()
        self._synchronized = True

    def clip_grad_norm(self, max_norm: float) -> float:
        """Scale the shard gradients so that the whole gradient's 2-norm is at most ``max_norm``; the norm."""
        self.synchronize()
        local = np.array([np.dot(self.grad, self.grad)], dtype=np.float64)
        total = float(np.sqrt(collectives.allreduce(self.comm, local, op="sum", algorithm="ring")[0]))
        coef = max_norm / (total + 1e-6)
        if coef < 1.0:
            self.grad *= coef
        return total

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """Synchronize, update this rank's shard, and (stages 1, 2) allgather the updated shards."""
        if closure is not None:
            raise ValueError("ZeroOptimizer.step does not take a closure (its gradients would not be reduced)")
        self.synchronize()
        for inner, outer in zip(self.inner.param_groups, self.optimizer.param_groups):
            inner.update({k: v for k, v in outer.items() if k != "params"})  # an LR schedule's changes
        for group in self.inner.param_groups:
            for p in group["params"]:
                p.grad = self.grad[p.zero_slice]
        self.inner.step()
        start = self.timings.mark()
        if self.stage < 3 and self.comm.Get_size() > 1:  # in place: every rank's updated shard to every rank
            ring.allgather_into(self.comm, self.flat, [min(x, self.bucket.numel) for x in self.bounds])
        self.timings.add("communication", _elapsed(start))
        self.timings.end_step()
        self._synchronized = False
        self.updates += 1
        return True

    def finish(self) -> None:
        """End of training: every rank gets the whole model back (stage 3 stops sharding)."""
        if self.stage == 3 and self._units:
            for unit in self._units:
                unit.__dict__.pop("forward", None)
            self.gather(self.params)
            self._units = []

    # -- parameters: gather and release
    def gather(self, params: list[Tensor]) -> None:
        """Allgather the shards covering ``params`` (a contiguous run of the flat vector) into them."""
        index = {id(p): i for i, p in enumerate(self.bucket.params)}
        positions = sorted(index[id(p)] for p in params)
        first, last = positions[0], positions[-1]
        if positions != list(range(first, last + 1)):
            raise ValueError("ZeRO stage 3: a unit's parameters must be consecutive in the model's parameter order")
        a = self.bucket.offsets[first]
        b = self.bucket.offsets[last] + self.bucket.params[last].data.size
        bounds = [min(max(x, a), b) - a for x in self.bounds]  # each rank's part of [a, b)
        buf = np.empty(b - a, dtype=self.bucket.dtype)
        mine_lo, mine_hi = max(a, self.lo), min(b, self.hi)  # this rank's shard within [a, b)
        if mine_hi > mine_lo:
            buf[mine_lo - a : mine_hi - a] = self.shard[mine_lo - self.lo : mine_hi - self.lo]
        if self.comm.Get_size() > 1:
            ring.allgather_into(self.comm, buf, bounds)
        for p in self.bucket.params[first : last + 1]:
            self._gathered.add(id(p))
            start = self.bucket.offsets[index[id(p)]] - a
            p.data = buf[start : start + p.data.size].reshape(p.data.shape)

    def _check_gathered(self) -> None:
        """Stage 3: a parameter with a gradient that no unit gathered was computed with from its placeholder."""
        missed = [i for i, p in enumerate(self.params) if p.grad is not None and id(p) not in self._gathered]
        self._gathered = set()
        if missed:
            raise RuntimeError(
                f"ZeRO stage 3: parameters {missed[:5]} got gradients but were never gathered: the module that uses "
                "them ran outside the units given (module=); pass the model as the units it runs"
            )

    def release(self, params: list[Tensor]) -> None:
        """Stage 3: drop the gathered values (a zero-stride placeholder keeps each shape, holding nothing)."""
        for p in params:
            p.data = np.broadcast_to(np.zeros((), p.data.dtype), p.data.shape)

    @contextmanager
    def gathered(self) -> Iterator[None]:
        """The whole model on every rank for the duration (stage 3: e.g. to save a checkpoint)."""
        if self.stage == 3:
            self.gather(self.params)
        try:
            yield
        finally:
            if self.stage == 3:
                self.release(self.params)

    # -- what each rank holds
    def memory_bytes(self) -> dict[str, int]:
        """Bytes this rank holds now: parameters, gradients and optimizer state (views and placeholders excluded)."""
        held = self.flat.nbytes if self.stage < 3 else self.shard.nbytes
        grads = sum(p.grad.nbytes for p in self.params if p.grad is not None)
        shard_grad = getattr(self, "grad", None)
        state = sum(v.nbytes for s in self.inner.state.values() for v in s.values() if isinstance(v, np.ndarray))
        return {
            "parameters": held,
            "gradients": grads + (0 if shard_grad is None else shard_grad.nbytes),
            "optimizer_state": state,
        }

    def __repr__(self) -> str:
        n = self.bucket.numel
        return f"ZeroOptimizer(stage={self.stage}, shard [{self.lo}, {self.hi}) of {n} values)\nwrapping {self.optimizer!r}"


def _elapsed(start: float) -> float:
    import time

    return time.perf_counter() - start


def _flatten(params: list[Tensor], bucket: Bucket) -> np.ndarray:
    flat = np.empty(bucket.numel, dtype=bucket.dtype)
    for p, start in zip(bucket.params, bucket.offsets):
        flat[start : start + p.data.size] = p.data.reshape(-1)
    return flat


def _shard_optimizer(optimizer: Optimizer, bucket: Bucket, shard: np.ndarray, lo: int, hi: int) -> Optimizer:
    """A copy of ``optimizer`` whose parameters are views of ``shard``: one per group that meets [lo, hi)."""
    index = {id(p): i for i, p in enumerate(bucket.params)}
    groups = []
    for group in optimizer.param_groups:
        starts = [bucket.offsets[index[id(p)]] for p in group["params"]]
        ends = [s + p.data.size for s, p in zip(starts, group["params"])]
        a, b = max(min(starts), lo), min(max(ends), hi)
        piece = Parameter(np.empty(0, dtype=bucket.dtype))
        if b > a:
            piece.data = shard[a - lo : b - lo]  # a view: the update writes into the shard
        piece.zero_slice = slice(max(a - lo, 0), max(b - lo, 0))  # type: ignore[attr-defined]
        groups.append({k: v for k, v in group.items() if k != "params"} | {"params": [piece]})
    inner = object.__new__(type(optimizer))
    inner.__dict__.update(optimizer.__dict__)
    inner.param_groups, inner.state = groups, {}
    return inner


def _units(module: Module) -> list[Module]:
    """Stage 3's units, each gathering its parameters around its forward: the children of a Sequential (a
    model cut into units, as the trainer runs it), else every module that owns parameters itself (Linear,
    Embedding, LSTM, Conv2d, BatchNorm), in registration order."""
    if isinstance(module, Sequential):
        units = list(module.children())
    else:
        units = [m for m in module.modules() if m._parameters]
    return [u for u in units if any(True for _ in u.parameters())]


def _wrap_forward(unit: Module, zero: ZeroOptimizer) -> None:
    """Stage 3: gather the unit's parameters before its forward, release them after."""
    forward, params = unit.forward, list(unit.parameters())

    def gathered_forward(*args: Any, **kwargs: Any) -> Any:
        zero.gather(params)
        try:
            return forward(*args, **kwargs)
        finally:
            zero.release(params)

    unit.forward = gathered_forward  # type: ignore[method-assign]
