"""The compute profile of one data-parallel training step, measured on one real rank here.

A step of ``DistributedOptimizer`` training is

    forward | backward | allreduce of each fusion bucket | update (clipping, the optimizer's step)

and what a cluster changes is only the allreduces. So one rank's step, timed on this machine, gives
everything else: the forward, backward and update times, the fusion plan (the buckets
``DistributedOptimizer`` builds for ``fusion_bytes``: their sizes), and **when each bucket becomes
ready during the backward**, which is what overlapping communication with the backward can use.

How the ready times are measured: minidl's backward writes a parameter's gradient in one place,
``minidl.autograd.accumulate_grad``. While profiling, ``gradient_clock()`` wraps that function so that
every write stamps ``time.perf_counter()`` for its parameter; a parameter's gradient is final at its
last write, and a bucket is ready when the last of its parameters is (the output layer's bucket early
in the backward, the embedding's at its very end). The stamps cost ~1 us per write, included in the
measured backward. Each bucket's local work around its allreduce (packing the gradients into the
fusion buffer, unpacking and scaling the result: ``DistributedOptimizer``'s own ``fusion.pack`` and
``unpack``) is timed too. Each time is the minimum over the profiled steps after a warm-up step, with one
BLAS thread (a rank on one core, as the trainer's ranks run; ``NodeSpec`` scales to bigger nodes).

Why the minimum: on a shared machine another process takes the core for part of some steps, and load only
ever adds time, so the fastest step is the closest to the step alone (a profile of medians taken while the
machine was busy ran 10x slow, and turned a simulated 1GbE cluster's 19-25% efficiency into 70-76%). The
spread of the steps (median over fastest) says how busy the machine was: the profile's source reports it,
and above ``max_spread`` (``MAX_SPREAD``: a median step twice the fastest) the profile is refused
(``ContentionError``), as even the fastest step was then likely slowed. Ready times stay fractions of each
step's backward (medians): a slow step stretches its backward as a whole.
"""

from __future__ import annotations

import importlib
import json
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import numpy as np
from threadpoolctl import threadpool_limits

import minidl.distributed as dist
from minidl.distributed.comm import SingleProcess
from minidl.distributed.data_parallel import fusion  # pack / unpack: DistributedOptimizer's own copies
from minidl.distributed.data_parallel.sparse_rows import nonzero_rows
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer

_autograd = importlib.import_module("minidl.autograd")  # where backward writes the leaves' gradients
MAX_SPREAD = 1.0  # refuse a profile whose median step takes more than (1 + this) x its fastest
MIN_JUDGED = 3  # with fewer steps (a quick run's 1 or 2) the spread is not judged


class ContentionError(ValueError):
    """The profiled steps spread too widely: other processes were using this machine's cores."""


@dataclass(frozen=True)
class BucketProfile:
    """One fusion bucket: its bytes, when it is ready (s after the backward starts), its pack + unpack time.

    A bucket exchanged by rows (``--sparse-embedding``: an embedding table's gradient, sparse_rows.py) has
    ``rows`` > 0, the non-zero rows this rank's gradient holds in a step (median), of ``row_bytes`` each.
    """

    nbytes: int
    ready_s: float
    pack_s: float = 0.0
    rows: int = 0
    row_bytes: int = 0


@dataclass(frozen=True)
class Profile:
    """One rank's training step: ``items`` (words or images) per step, phase times in seconds, the buckets."""

    task: str
    unit: str  # "words" or "images"
    items: int  # per rank per step
    forward_s: float
    backward_s: float
    update_s: float
    buckets: tuple[BucketProfile, ...]
    source: str = ""  # where the numbers come from (measured here, or a described node)
    notes: tuple[str, ...] = field(default_factory=tuple)
    activation_bytes: int = 0  # at a layer boundary, for the step's batch (pipeline and tensor parallelism's messages)
    layers: int = 1  # layers a tensor-parallel step allreduces activations for (twice each)
    sequential: int = 1  # exchanges per layer and step in tensor parallelism: an RNN's time steps (each its own)
    mean_step_s: float = 0.0  # measured: the mean of the profiled steps' F + B + U (0: not measured)
    step_cv: float = 0.0  # measured: their coefficient of variation (std / mean), a rank's jitter from step to step

    @property
    def compute_s(self) -> float:
        return self.forward_s + self.backward_s + self.update_s

    @property
    def gradient_bytes(self) -> int:
        return sum(b.nbytes for b in self.buckets)

    def scaled(self, speedup: float) -> Profile:
        """The same step on a rank ``speedup`` times as fast: every time divided by it."""
        if not speedup > 0:
            raise ValueError(f"a speed-up must be positive, got {speedup}")
        buckets = tuple(replace(b, ready_s=b.ready_s / speedup, pack_s=b.pack_s / speedup) for b in self.buckets)
        s = speedup
        return replace(
            self,
            forward_s=self.forward_s / s,
            backward_s=self.backward_s / s,
            update_s=self.update_s / s,
            buckets=buckets,
            mean_step_s=self.mean_step_s / s,
        )

    def at_mean(self) -> Profile:
        """The profile at its mean step rather than its fastest phases (a real run's items/s are a mean over its
        steps): every time scaled by mean_step_s / compute_s; itself where the mean was not measured."""
        return self.scaled(self.compute_s / self.mean_step_s) if self.mean_step_s else self

    def describe(self) -> str:
        sizes = ", ".join(f"{b.nbytes / 2**20:.2f} MiB ready at {1e3 * b.ready_s:.1f} ms" for b in self.buckets)
        return (
            f"{self.task}: {self.items} {self.unit}/step per rank; forward {1e3 * self.forward_s:.1f} ms, backward "
            f"{1e3 * self.backward_s:.1f} ms, update {1e3 * self.update_s:.1f} ms; {len(self.buckets)} bucket(s): {sizes}"
        )

    # -- files
    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Profile:
        try:
            buckets = tuple(BucketProfile(**b) for b in d["buckets"])
            return cls(**{**d, "buckets": buckets, "notes": tuple(d.get("notes", ()))})
        except (KeyError, TypeError) as e:
            raise ValueError(f"not a profile: {e}") from None

    def save(self, path: str) -> None:
        with open(path, "w") as f:
            json.dump(self.to_dict(), f, indent=1)

    @classmethod
    def load(cls, path: str) -> Profile:
        with open(path) as f:
            return cls.from_dict(json.load(f))


def described(
    params: float,
    rate: float,
    batch: int,
    unit: str = "images",
    task: str = "described",
    bytes_per_param: int = 4,
    fusion_bytes: int = dist.DEFAULT_FUSION_BYTES,
    source: str = "",
) -> Profile:
    """A profile from a described node instead of a measurement: ``params`` parameters, ``rate`` items/s of one
    rank alone, ``batch`` items per step.

    Assumed (and said in ``notes``): the compute of a step is batch / rate; the forward is 1/3 of it and the
    backward 2/3 (the backward computes two products per forward one: gradients for inputs and weights); the
    update is negligible; gradients become ready at an even pace through the backward, the output layer's first
    (buckets of ``fusion_bytes`` in the parameter order, the last one ready first).
    """
    if not (0 < params < 1e15 and 0 < rate < 1e15 and batch > 0):  # finite, and a step of at most 2^53 bytes
        raise ValueError(
            f"a described profile needs positive finite params, rate and batch (params and rate below 1e15), got "
            f"{params}, {rate}, {batch}"
        )
    step = batch / rate
    total = int(params) * bytes_per_param
    per = max(fusion_bytes, 1) if fusion_bytes else total
    sizes = [min(per, total - i) for i in range(0, total, per)]
    buckets, done = [], 0
    for size in reversed(sizes):  # the last bucket (output layers) is ready first
        done += size
        buckets.append(BucketProfile(size, 2 * step / 3 * done / total))
    return Profile(
        task,
        unit,
        int(batch),
        step / 3,
        2 * step / 3,
        0.0,
        tuple(reversed(buckets)),
        source or f"described: {params:,.0f} parameters, {rate:g} {unit}/s, batch {batch}",
        ("forward 1/3, backward 2/3 of batch/rate; gradients ready at an even pace through the backward",),
    )


# ----------------------------------------------------------------------------- measuring
@contextmanager
def gradient_clock() -> Iterator[dict[int, float]]:
    """Within the block, {id(parameter): time of the last write of its gradient} (see the module doc)."""
    original = getattr(_autograd, "accumulate_grad", None)
    if original is None:
        raise RuntimeError("minidl.autograd.accumulate_grad is gone: update minidl.simulate.profile.gradient_clock")
    stamps: dict[int, float] = {}

    def timed(t: Any, g: Any, owned: bool = False) -> None:
        original(t, g, owned)
        stamps[id(t)] = time.perf_counter()

    _autograd.accumulate_grad = timed
    try:
        yield stamps
    finally:
        _autograd.accumulate_grad = original


def fusion_plan(optimizer: Optimizer, fusion_bytes: int) -> list[Any]:
    """The buckets ``DistributedOptimizer`` packs for ``optimizer``'s parameters (the trainer's plan)."""
    return dist.DistributedOptimizer(optimizer, fusion_bytes=fusion_bytes, comm=SingleProcess()).buckets


def _one_step(
    forward: Callable[[], Any], update: Callable[[], None], buckets: list[Any], model: Module
) -> tuple[float, float, float, list[float], list[float], list[int]]:
    """Times of one step: forward, backward, update, each bucket's ready time and pack + unpack time, and the
    non-zero rows of each rows bucket (0 for a dense one). A rows bucket's local work is finding its non-zero
    rows and copying them out and back (sparse_rows.exchange_rows without the messages)."""
    model.zero_grad()
    t0 = time.perf_counter()
    loss = forward()
    t1 = time.perf_counter()
    with gradient_clock() as stamps:
        loss.backward()
    t2 = time.perf_counter()
    ready = [max((stamps.get(id(p), t1) for p in b.params), default=t1) - t1 for b in buckets]
    packs, rows = [], []
    for b in buckets:  # the copies around a bucket's allreduce (the allreduce itself is the network's)
        s = time.perf_counter()
        rows.append(_rows_work(b.params[0].grad) if b.rows else 0)
        if not b.rows:
            fusion.unpack(b, fusion.pack(b), 1.0 / 2)  # as DistributedOptimizer scales by 1/P (gradients halved)
        packs.append(time.perf_counter() - s)
    t3 = time.perf_counter()
    update()
    t4 = time.perf_counter()
    return t1 - t0, t2 - t1, t4 - t3, ready, packs, rows


def _rows_work(g: Any) -> int:
    """A rows bucket's local work (find the non-zero rows, copy them out, add them back); how many there are."""
    if g is None:
        return 0
    rows = g.reshape(len(g), -1)
    ids = nonzero_rows(g)
    rows[ids] += rows[ids].copy()  # the rows out to the allgather and back into the table, summed
    rows[ids] *= 0.5
    return len(ids)


def _row_bytes(bucket: Any) -> int:
    """Bytes of one row of a rows bucket's table (its one parameter, [V, ...])."""
    data = bucket.params[0].data
    return int(data[0].nbytes) if len(data) else 0


def capture(
    task: str,
    unit: str,
    items: int,
    model: Module,
    optimizer: Optimizer,
    forward: Callable[[], Any],
    update: Callable[[], None],
    fusion_bytes: int = dist.DEFAULT_FUSION_BYTES,
    steps: int = 5,
    source: str = "measured on this machine, one rank",
    max_spread: float | None = None,
) -> Profile:
    """Run ``steps`` + 1 training steps (``forward()`` returns the loss; ``update()`` clips and steps) and return
    the minima as a ``Profile`` (the first step is a warm-up and not counted). With ``max_spread``, a
    ``ContentionError`` where the median step exceeds the fastest by more than that fraction (the module doc)."""
    if steps < 1:
        raise ValueError(f"profile steps must be >= 1, got {steps}")
    buckets = fusion_plan(optimizer, fusion_bytes)
    with threadpool_limits(limits=1, user_api="blas"):  # one rank = one core, as the trainer's ranks run
        runs = [_one_step(forward, update, buckets, model) for _ in range(steps + 1)][1:]
    totals = [r[0] + r[1] + r[2] for r in runs]
    spread = judge_spread(totals, max_spread)
    fwd, bwd, upd = (float(np.min([r[i] for r in runs])) for i in range(3))
    # ready times as fractions of each step's backward, so that one slow step does not shift them
    frac = np.median([np.asarray(r[3]) / max(r[1], 1e-12) for r in runs], axis=0)
    pack = np.min([r[4] for r in runs], axis=0)
    rows = np.median([r[5] for r in runs], axis=0)
    profiled = tuple(
        BucketProfile(int(b.nbytes), float(min(f, 1.0) * bwd), float(s), int(k), _row_bytes(b) if b.rows else 0)
        for b, f, s, k in zip(buckets, frac, pack, rows)
    )
    source = f"{source}, minimum of {steps} steps, {spread}"
    mean, cv = float(np.mean(totals)), float(np.std(totals) / max(np.mean(totals), 1e-12))
    return Profile(task, unit, int(items), fwd, bwd, upd, profiled, source, mean_step_s=mean, step_cv=cv)


def judge_spread(totals: list[float], max_spread: float | None) -> str:
    """The steps' spread in words ("spread +12% (median step over fastest)"); a ``ContentionError`` above
    ``max_spread``. Fewer than ``MIN_JUDGED`` steps are not judged."""
    if len(totals) < MIN_JUDGED:
        return "spread not judged (fewer than 3 steps)"
    fastest, median = min(totals), float(np.median(totals))
    spread = median / max(fastest, 1e-12) - 1
    if max_spread is not None and spread > max_spread:
        raise ContentionError(
            f"the profile's {len(totals)} steps spread +{100 * spread:.0f}% (median {1e3 * median:.1f} ms, fastest "
            f"{1e3 * fastest:.1f} ms; at most +{100 * max_spread:.0f}%): other processes are using this machine's "
            "cores, so the times would be theirs; measure on a quiet machine (--save-profile FILE there, --profile "
            "FILE here)"
        )
    return f"spread +{100 * spread:.0f}% (median step over fastest)"
