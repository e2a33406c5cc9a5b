"""DistributedOptimizer: synchronous data parallelism by gradient averaging (Horovod's design).

Every rank holds the whole model and computes gradients on its own share of the batch. Before each
update the gradients are averaged over the ranks with an allreduce; the update then starts from
the same parameters with the same averaged gradient on every rank, so the replicas stay identical
(Sergeev & Del Balso 2018, "Horovod"). If each rank's loss is the mean over its b examples,

    mean over ranks of (mean over rank r's examples of grad loss) = mean over all P*b examples,

so P ranks with batch b take exactly the step one process takes with batch P*b (up to rounding).

Wrap any minidl optimizer::

    opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), allreduce="ring")
    for x, y in batches:
        opt.zero_grad()
        loss_fn(model(x), y).backward()
        opt.step()          # allreduce (fused, maybe compressed) then SGD's own update

Gradient clipping by global norm must see the averaged gradients: call ``opt.synchronize()`` first,
then clip, then ``opt.step()`` (which does not allreduce twice).

``backward_passes_per_step=k`` accumulates k backward passes locally before one allreduce and one
update: ``step()`` and ``zero_grad()`` are still called every pass, but only every k-th ``step()``
communicates and updates (it returns True then), and ``zero_grad()`` clears only after an update.
With op="average" the result is the average over ranks *and* passes: k passes of batch b on P ranks
equal one step with batch k*P*b. Clip only on the updating pass::

    if opt.will_update:
        opt.synchronize()
        optim.clip_grad_norm(model.parameters(), 5.0)
    opt.step()

The first allreduce of each fusion plan runs the collectives' agreement check (every rank must pack
the same sizes and dtypes, else a clear error on every rank); later ones skip it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel import compression as _compression
from minidl.distributed.data_parallel.allreduce import ALGORITHMS, check_algorithm
from minidl.distributed.data_parallel.fusion import Bucket, allreduce_buckets, plan_buckets
from minidl.distributed.data_parallel.overlap import BucketOverlap
from minidl.distributed.data_parallel.timing import StepTimings
from minidl.distributed.fingerprint import check_layout, optimizer_rows, parameter_rows
from minidl.distributed.timeout import activity
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor

DEFAULT_FUSION_BYTES = 64 * 2**20  # Horovod's default HOROVOD_FUSION_THRESHOLD
OPS = ("average", "sum")


class DistributedOptimizer(Optimizer):
    """Average gradients across ranks, then apply the wrapped optimizer's update.

    Args:
        optimizer: any minidl optimizer (SGD, Adam, LARS, ...); its state and hyperparameters are
            the ones used (``param_groups``, ``state``, ``state_dict()`` are the wrapped optimizer's).
        allreduce: "ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto" (collectives'
            cost-model choice) or "mpi" (the MPI library's Allreduce, for comparison).
        op: "average" (divide the sum by the number of ranks and of accumulated passes) or "sum".
        fusion_bytes: the most gradient bytes packed into one allreduce (0: one allreduce per parameter).
        compression: None, or "fp16" to send float16 on the wire.
        backward_passes_per_step: k, the backward passes accumulated per allreduce and update.
        comm: the communicator (default: the one from ``dist.init()``).
        named_parameters: ``model.named_parameters()`` (as Horovod takes it): the ranks then compare the
            parameters' names too, so a model that declares them in another order on one rank fails
            before the first step instead of mixing unrelated gradients.
        overflow: what a non-finite sum after an fp16 allreduce does: "raise" (a FloatingPointError naming
            the bucket) or "skip" (print a warning and skip the update, as a loss scaler would).
        measure_wait: put a barrier before the allreduces so ``timings`` can tell waiting for the slowest
            rank apart from communication (one extra tiny message round per step).
        overlap: allreduce each bucket on a communication thread as soon as backward has finished its
            gradients (overlap.py).
        sparse_as_dense: Horovod's flag. False (the default): a parameter marked ``sparse_grad``
            (``nn.Embedding(sparse=True)``'s weight) is exchanged as its non-zero rows, an allgather
            (sparse_rows.py); True: allreduced whole like the rest. Without compression only.

    Attributes:
        timings: ``StepTimings``; ``print(opt.timings)`` shows the last step's compute / wait /
            communication, ``opt.timings.summary()`` their means.
        buckets: the fusion plan (``fusion.Bucket`` list), fixed by the parameter order.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        allreduce: str = "ring",
        op: str = "average",
        fusion_bytes: int = DEFAULT_FUSION_BYTES,
        compression: str | None = None,
        backward_passes_per_step: int = 1,
        comm: Any = None,
        measure_wait: bool = True,
        named_parameters: Any = None,
        overflow: str = "raise",
        overlap: bool = False,
        sparse_as_dense: bool = False,
    ):
        # No Optimizer.__init__: hyperparameters and state live in the wrapped optimizer (see the properties).
        if not isinstance(optimizer, Optimizer) or isinstance(optimizer, DistributedOptimizer):
            raise TypeError(
                f"DistributedOptimizer wraps a minidl optimizer (SGD, Adam, ...), got {type(optimizer).__name__}"
            )
        if op not in OPS:
            raise ValueError(f"DistributedOptimizer: op must be one of {OPS}, got {op!r}")
        if int(backward_passes_per_step) != backward_passes_per_step or backward_passes_per_step < 1:
            raise ValueError(f"backward_passes_per_step must be an integer >= 1, got {backward_passes_per_step!r}")
        self.optimizer = optimizer
        self.comm = get_comm(comm)
        self.algorithm = check_algorithm(allreduce)
        self.op = op
        self.fusion_bytes = int(fusion_bytes)
        self.compression = _compression.check(compression)
        self.sparse_as_dense = bool(sparse_as_dense)
        self.backward_passes_per_step = int(backward_passes_per_step)
        self.measure_wait = measure_wait
        if overflow not in ("raise", "skip"):
            raise ValueError(f"DistributedOptimizer: overflow must be 'raise' or 'skip', got {overflow!r}")
        self.overflow = overflow
        self.names = _names_of(named_parameters, self._params())
        self.updates = 0  # updates applied (the step a timeout names)
        self.skipped = 0  # updates skipped after an fp16 overflow (overflow="skip")
        self._overflowed = False  # this update's fp16 sum was not finite (overflow="skip")
        self.timings = StepTimings()
        self.buckets: list[Bucket] = []
        self._planned_for: tuple[int, ...] = ()
        self._passes = 0  # step() calls since the last update
        self._synchronized = False
        self._layout_checked = False  # have the ranks confirmed they pack the same buckets?
        self.overlap = bool(overlap)
        self.timeline: Any = None  # a minidl.distributed.timeline.Timeline to record each bucket's allreduce
        self._overlap: BucketOverlap | None = None
        self._plan()
        self._check_ranks_agree()
        self.timings.restart()

    def _check_ranks_agree(self, call: str = "DistributedOptimizer") -> None:
        """Every rank must wrap the same model and optimizer with the same settings: a rank with another
        backward_passes_per_step would allreduce on other steps than the rest and leave them waiting forever,
        one whose parameters differ in order or shape would mix unrelated gradients, one with another learning
        rate or optimizer would drift apart. One small allgather of the settings and a digest of the layout
        (``fingerprint.py``); the full table only on a mismatch."""
        if self.comm.Get_size() == 1:
            return
        # each setting as an integer code: (name, code, decode)
        settings = [
            ("allreduce", ALGORITHMS.index(self.algorithm), lambda c: ALGORITHMS[c]),
            ("op", OPS.index(self.op), lambda c: OPS[c]),
            ("fusion_bytes", self.fusion_bytes, int),
            ("compression", int(self.compression is not None), lambda c: "fp16" if c else None),
            ("backward_passes_per_step", self.backward_passes_per_step, int),
            ("sparse_as_dense", int(self.sparse_as_dense), bool),
        ]
        rows = parameter_rows(zip(self.names, self._params())) + optimizer_rows(self.optimizer)
        with activity(call):
            check_layout(self.comm, rows, call, settings)

    # -- the wrapped optimizer's state is the state
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    @param_groups.setter
    def param_groups(self, groups: list[dict[str, Any]]) -> None:
        self.optimizer.param_groups = groups

    @property
    def state(self) -> dict[Tensor, dict[str, Any]]:
        return self.optimizer.state

    @property
    def defaults(self) -> dict[str, Any]:
        return self.optimizer.defaults

    def add_param_group(self, group: dict[str, Any], names: Any = None) -> None:
        """Add a parameter group on every rank (collective: every rank must call it, with the same group, and the
        ranks compare their layouts again; ``names``: the new parameters' names, if the optimizer has names)."""
        self.optimizer.add_param_group(group)
        added = self.optimizer.param_groups[-1]["params"]
        self.names = self.names + (list(names) if names is not None else [None] * len(added))
        self._plan()
        self._check_ranks_agree("DistributedOptimizer.add_param_group")

    def state_dict(self) -> dict[str, Any]:
        return self.optimizer.state_dict()

    def load_state_dict(self, state_dict: dict[str, Any], cast: bool = False) -> None:
        self.optimizer.load_state_dict(state_dict, cast=cast)

    # -- the fusion plan
    def _params(self) -> list[Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _plan(self) -> None:
        params = self._params()
        # reverse order of the forward: backward finishes the first bucket first (what overlap needs)
        rows = not self.sparse_as_dense and self.compression is None  # fp16 rows: not done; allreduced whole
        self.buckets = plan_buckets(reversed(params), self.fusion_bytes, rows=rows)
        self._planned_for = tuple(id(p) for p in params)
        self._layout_checked = False
        if self.overlap:
            self._hook_parameters(params)

    def _hook_parameters(self, params: list[Tensor]) -> None:
        """Overlap: a hook on each parameter tells the (re)planned buckets when its gradient is final."""
        if self._overlap is not None:
            self._overlap.close()
        self._overlap = BucketOverlap(self)
        hooked = getattr(self, "_hooked", set())
        for p in params:
            if id(p) not in hooked:
                p.register_post_accumulate_grad_hook(lambda t: self._overlap and self._overlap.param_ready(t))
                hooked.add(id(p))
        self._hooked = hooked

    def record(self, k: int, began: float, thread: str) -> None:
        """Bucket k's allreduce, from ``began`` until now, on the timeline (when one is kept: ``--timeline``)."""
        if self.timeline is not None:
            bucket = self.buckets[k]
            args = {"algorithm": self.algorithm, "bytes": int(bucket.nbytes), "tensors": len(bucket.params)}
            if bucket.rows:  # bytes: the whole table's, which only a dense fallback moves
                args["exchange"] = "non-zero rows by allgather (whole table when they are over half)"
            name = "rows exchange" if bucket.rows else "allreduce"
            self.timeline.add(f"{name} bucket {k}", began, time.perf_counter(), thread, **args)

    def _scale(self) -> float:
        """What the summed gradients are multiplied by: 1 / (ranks x accumulated passes) for "average"."""
        return 1.0 / (self.comm.Get_size() * (self._passes + 1)) if self.op == "average" else 1.0

    # -- accumulation
    @property
    def will_update(self) -> bool:
        """Whether the next ``step()`` call synchronizes and updates (the k-th backward pass)."""
        return self._passes + 1 >= self.backward_passes_per_step

    @property
    def pending_passes(self) -> int:
        """Backward passes accumulated since the last update (0 right after an update)."""
        return self._passes

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Clear the gradients, except while passes are being accumulated for the next update."""
        if self._passes == 0:
            self.optimizer.zero_grad(set_to_none)

    # -- communication
    def synchronize(self) -> None:
        """Average (or sum) every gradient over the ranks now; ``step()`` will not do it again.

        Call it before anything that must see the averaged gradients, e.g. ``clip_grad_norm``.
        """
        if self._synchronized:
            return
        if not self.will_update:
            raise RuntimeError(
                f"synchronize() on backward pass {self._passes + 1} of {self.backward_passes_per_step}: gradients "
                "are allreduced only on the last pass of an update (check opt.will_update)"
            )
        if tuple(id(p) for p in self._params()) != self._planned_for:
            self._plan()
        start = self.timings.mark()  # forward + backward since the last step were compute
        size = self.comm.Get_size()
        scale = self._scale()
        if self._overlap is not None and size > 1:
            # the buckets launched during backward; what is left now, then wait (exposed communication)
            with activity("DistributedOptimizer.step", step=self.updates):
                self._overlap.finish()  # (an fp16 overflow sets self._overflowed from the communication thread)
            self._layout_checked = True
        elif size == 1:
            if scale != 1.0:
                for p in self._params():
                    if p.grad is not None:
                        p.grad *= scale
        else:
            with activity("DistributedOptimizer.step", step=self.updates):
                if self.measure_wait:
                    self.comm.Barrier()
                    now = time.perf_counter()
                    self.timings.add("wait", now - start)
                    if self.timeline is not None:
                        self.timeline.add("wait", start, now)
                    start = now
                for k, bucket in enumerate(self.buckets):
                    began = time.perf_counter()
                    # the first exchange checks that every rank packs the same sizes and dtypes; later ones need not
                    self._overflowed |= not allreduce_buckets(
                        [bucket],
                        self.comm,
                        self.algorithm,
                        scale,
                        self.compression,
                        check=not self._layout_checked,
                        overflow=self.overflow,
                    )
                    self.record(k, began, "main")
            self._layout_checked = True
        self.timings.add("communication", time.perf_counter() - start)
        self.timings.restart()
        self._synchronized = True

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """Count a backward pass; on every k-th, synchronize and apply the wrapped optimizer's update.

        Returns True when it updated the parameters, False while accumulating.
        """
        if closure is not None:
            raise ValueError(
                "DistributedOptimizer.step does not take a closure: gradients a closure computes after "
                "synchronization would not be averaged across ranks"
            )
        if not self.will_update:
            self._passes += 1
            return False
        self.synchronize()
        if self._overflowed:  # overflow="skip": the sum is not finite on any rank, so every rank skips
            self.skipped += 1
            self._overflowed = False
        else:
            self.optimizer.step()
        self.updates += 1
        self._passes = 0
        self._synchronized = False
        self.timings.end_step()
        return True

    def __repr__(self) -> str:
        sizes = ", ".join(f"{b.nbytes / 2**20:.2f}" for b in self.buckets)
        return (
            f"DistributedOptimizer(allreduce={self.algorithm!r}, op={self.op!r}, compression={self.compression!r}, "
            f"backward_passes_per_step={self.backward_passes_per_step}, {len(self.buckets)} buckets of [{sizes}] MiB)\n"
            f"wrapping {self.optimizer!r}"
        )


def average_gradients(params: list[Tensor], algorithm: str = "ring", comm: Any = None) -> None:
    """Average ``p.grad`` over the ranks for each parameter, in place: one fused allreduce, no optimizer.

    The functional core of ``DistributedOptimizer`` for loops that update parameters themselves.
    """
    comm = get_comm(comm)
    if comm.Get_size() > 1:
        allreduce_buckets(plan_buckets(params, DEFAULT_FUSION_BYTES), comm, algorithm, 1.0 / comm.Get_size())


def _names_of(named_parameters: Any, params: list[Tensor]) -> list[str | None]:
    """The name of each optimized parameter, in the optimizer's order (None where there are no names)."""
    if named_parameters is None:
        return [None] * len(params)
    by_id = {id(p): name for name, p in named_parameters}
    return [by_id.get(id(p)) for p in params]


__all__ = ["DistributedOptimizer", "allreduce_buckets", "average_gradients", "DEFAULT_FUSION_BYTES"]
