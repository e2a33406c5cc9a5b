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
the same sizes and dtypes, else a clear error on every rank); later ones skip it. Every exchange starts
by agreeing on the step (lockstep.py): ranks at different steps raise on every rank, naming them.

The class is the ladder's three steps behind Horovod's interface: the settings and the exchange
strategies are in gradient_exchange.py (``synchronize`` hands each update to one of them), the timings, the
timeline and the watchdog's step name in timing.py's ``ExchangeClock``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from minidl.distributed import lockstep
from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.fusion import DEFAULT_FUSION_BYTES, Bucket, plan_buckets
from minidl.distributed.data_parallel.gradient_exchange import Exchange, ExchangeSettings, Round, make_exchange
from minidl.distributed.data_parallel.timing import ExchangeClock, StepTimings
from minidl.distributed.fingerprint import check_layout, optimizer_rows, parameter_rows
from minidl.distributed.timeout import activity
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor

SETTINGS = tuple(f.name for f in dataclasses.fields(ExchangeSettings))


class DistributedOptimizer(Optimizer):
    """Average gradients across ranks, then apply the wrapped optimizer's update.

    Args:
        optimizer: any minidl optimizer (SGD, Adam, LARS, ...); its state and hyperparameters are
            the ones used (``param_groups``, ``state``, ``state_dict()`` are the wrapped optimizer's).
        settings: an ``exchange.ExchangeSettings`` (allreduce algorithm, op, fusion_bytes, compression,
            backward_passes_per_step, overflow, overlap, sparse_as_dense, measure_wait: see there), or
            None for the defaults; any of them may also be given by keyword (``allreduce="tree"``).
        comm: the communicator (default: the one from ``dist.init()``).
        named_parameters: ``model.named_parameters()`` (as Horovod takes it): the ranks then compare the
            parameters' names too, so a model that declares them in another order on one rank fails
            before the first step instead of mixing unrelated gradients.

    Attributes:
        timings: ``StepTimings``; ``print(opt.timings)`` shows the last step's compute / wait /
            communication, ``opt.timings.summary()`` their means.
        timeline: None, or a ``dist.Timeline`` on which each bucket's exchange is drawn.
        buckets: the fusion plan (``fusion.Bucket`` list), fixed by the parameter order.
        updates: the updates applied so far (the step the ranks agree on, and a timeout names).
    """

    def __init__(
        self,
        optimizer: Optimizer,
        settings: ExchangeSettings | None = None,
        *,
        comm: Any = None,
        named_parameters: Any = None,
        **options: Any,
    ):
        # No Optimizer.__init__: hyperparameters and state live in the wrapped optimizer (see the properties).
        if not isinstance(optimizer, Optimizer) or isinstance(optimizer, DistributedOptimizer):
            raise TypeError(
                f"DistributedOptimizer wraps a minidl optimizer (SGD, Adam, ...), got {type(optimizer).__name__}"
            )
        self.optimizer = optimizer
        self.comm = get_comm(comm)
        self.settings = _settings(settings, options)
        self.names = _names_of(named_parameters, self._params())
        self.updates = 0  # updates applied (the step the ranks agree on, and a timeout names)
        self.skipped = 0  # updates skipped after an fp16 overflow (overflow="skip")
        self.clock = ExchangeClock()
        self.buckets: list[Bucket] = []
        self.exchange: Exchange | None = None
        self._overflowed = False  # this update's fp16 sum was not finite (overflow="skip")
        self._passes = 0  # step() calls since the last update
        self._synchronized = False
        self._hooked: set[int] = set()  # parameters that carry the overlap hook
        self._plan()
        self._check_ranks_agree()
        self.clock.timings.restart()
        if self.comm.Get_size() > 1:
            lockstep.track(self.comm, self)  # the end of the run is agreed on too

    def _check_ranks_agree(self, call: str = "DistributedOptimizer") -> None:
        """Every rank must wrap the same model and optimizer with the same settings: a rank with another
        backward_passes_per_step would allreduce on other steps than the rest and leave them waiting forever,
        one whose parameters differ in order or shape would mix unrelated gradients, one with another learning
        rate or optimizer would drift apart. One small allgather of the settings and a digest of the layout
        (``fingerprint.py``); the full table only on a mismatch."""
        if self.comm.Get_size() == 1:
            return
        rows = parameter_rows(zip(self.names, self._params())) + optimizer_rows(self.optimizer)
        with activity(call, step=self.updates):
            check_layout(self.comm, rows, call, self.settings.codes())

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

    # -- the instruments
    @property
    def timings(self) -> StepTimings:
        return self.clock.timings

    @property
    def timeline(self) -> Any:
        return self.clock.timeline

    @timeline.setter
    def timeline(self, timeline: Any) -> None:
        self.clock.timeline = timeline

    # -- the fusion plan and its exchange
    def _params(self) -> list[Tensor]:
        return [p for g in self.optimizer.param_groups for p in g["params"]]

    def _plan(self) -> None:
        params = self._params()
        # reverse order of the forward: backward finishes the first bucket first (what overlap needs)
        self.buckets = plan_buckets(reversed(params), self.settings.fusion_bytes, rows=self.settings.rows)
        self._planned_for = tuple(id(p) for p in params)
        self._layout_checked = False  # have the ranks confirmed they pack the same buckets?
        if self.exchange is not None:
            self.exchange.close()
        self.exchange = make_exchange(self.comm, self.settings, self.buckets, self.clock, self._round)
        if self.settings.overlap:  # a hook on each parameter tells the exchange when its gradient is final
            for p in params:
                if id(p) not in self._hooked:
                    p.register_post_accumulate_grad_hook(self._param_ready)
                    self._hooked.add(id(p))

    def _param_ready(self, p: Tensor) -> None:
        if self.will_update and self.exchange is not None:  # an accumulating pass communicates nothing
            self.exchange.param_ready(p)

    def _round(self) -> Round:
        """This update's step, scale (1 / (ranks x accumulated passes) for "average") and layout check."""
        s = self.settings
        scale = 1.0 / (self.comm.Get_size() * (self._passes + 1)) if s.op == "average" else 1.0
        return Round(self.updates, scale, not self._layout_checked)

    # -- accumulation
    @property
    def will_update(self) -> bool:
        """Whether the next ``step()`` call synchronizes and updates (the k-th backward pass)."""
        return self._passes + 1 >= self.settings.backward_passes_per_step

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
                f"synchronize() on backward pass {self._passes + 1} of {self.settings.backward_passes_per_step}: "
                "gradients are allreduced only on the last pass of an update (check opt.will_update)"
            )
        if tuple(id(p) for p in self._params()) != self._planned_for:
            self._plan()
        assert self.exchange is not None
        with self.clock.exchange(self.updates):
            finite = self.exchange.run(self._round())
        self._layout_checked = True
        self._overflowed = not finite  # overflow="skip": the sum is not finite on any rank, so every rank skips
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
        if self._overflowed:
            self.skipped += 1
            self._overflowed = False
        else:
            self.optimizer.step()
        self.updates += 1
        self._passes = 0
        self._synchronized = False
        self.clock.timings.end_step()
        return True

    def __repr__(self) -> str:
        s, sizes = self.settings, ", ".join(f"{b.nbytes / 2**20:.2f}" for b in self.buckets)
        return (
            f"DistributedOptimizer(allreduce={s.allreduce!r}, op={s.op!r}, compression={s.compression!r}, "
            f"backward_passes_per_step={s.backward_passes_per_step}, {len(self.buckets)} buckets of [{sizes}] MiB)\n"
            f"wrapping {self.optimizer!r}"
        )


def _settings(settings: ExchangeSettings | None, options: dict[str, Any]) -> ExchangeSettings:
    """``settings`` (or the defaults) with the keyword ``options`` in place of its fields."""
    if settings is not None and not isinstance(settings, ExchangeSettings):
        raise TypeError(
            f"DistributedOptimizer: the second argument is an exchange.ExchangeSettings, got {type(settings).__name__} "
            "(give the allreduce algorithm by keyword: allreduce='ring')"
        )
    unknown = sorted(set(options) - set(SETTINGS))
    if unknown:
        raise TypeError(f"DistributedOptimizer: unknown setting(s) {unknown}; the settings are {list(SETTINGS)}")
    return dataclasses.replace(settings or ExchangeSettings(), **options)


def _names_of(named_parameters: Any, params: list[Tensor]) -> list[str | None]:
    """The name of each optimized parameter, in the optimizer's order (None where there are no names)."""
    if named_parameters is None:
        return [None] * len(params)
    by_id = {id(p): name for name, p in named_parameters}
    return [by_id.get(id(p)) for p in params]


__all__ = ["DEFAULT_FUSION_BYTES", "DistributedOptimizer"]
