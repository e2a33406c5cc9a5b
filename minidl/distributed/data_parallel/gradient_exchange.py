"""How ``DistributedOptimizer.synchronize`` moves the gradients: its settings, and one exchange strategy per mode.

The three strategies are the three steps of the ladder (see the package's docstring), behind one interface,
``run(round) -> finite``:

``OneRank``         p = 1: nothing to send; the gradients are only scaled (1 / passes for an average).
``AfterBackward``   step 2: when backward is done, the buckets one after another (fusion.py).
``DuringBackward``  step 3: each bucket as soon as backward has finished its gradients (overlap.py);
                    ``run`` sends what is left and waits.

Before its first bucket each of the last two agrees with the other ranks on the step (lockstep.py), so a
rank at another step, or in another collective, raises on every rank instead of hanging them.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from minidl.distributed.data_parallel import compression as _compression
from minidl.distributed.data_parallel.allreduce import ALGORITHMS, check_algorithm
from minidl.distributed.data_parallel.fusion import DEFAULT_FUSION_BYTES, Bucket, allreduce_buckets
from minidl.distributed.data_parallel.overlap import BucketOverlap
from minidl.distributed.data_parallel.timing import ExchangeClock
from minidl.distributed.lockstep import agree_on_step
from minidl.distributed.timeout import activity
from minidl.tensor import Tensor

OPS = ("average", "sum")


@dataclass(frozen=True)
class ExchangeSettings:
    """How a DistributedOptimizer exchanges gradients; every rank must use the same (they are compared).

    allreduce: "ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto" (collectives'
        cost-model choice), "hierarchical" or "hierarchical_rs" (node-aware: allreduce.py's module doc) or
        "mpi" (the MPI library's Allreduce, for comparison).
    op: "average" (divide the sum by the number of ranks and of accumulated passes) or "sum".
    fusion_bytes: the most gradient bytes packed into one allreduce (0: one allreduce per parameter).
    compression: None, or "fp16" to send float16 on the wire.
    backward_passes_per_step: k, the backward passes accumulated per allreduce and update.
    overflow: what a non-finite sum after an fp16 allreduce does: "raise" (a FloatingPointError naming
        the bucket) or "skip" (print a warning and skip the update, as a loss scaler would).
    overlap: allreduce each bucket on a communication thread as soon as backward has finished its
        gradients (overlap.py).
    sparse_as_dense: Horovod's flag. False: a parameter marked ``sparse_grad`` (``nn.Embedding(sparse=True)``'s
        weight) is exchanged as its non-zero rows, an allgather (sparse_rows.py); True: allreduced whole.
    measure_wait: charge the step agreement before the exchange (a barrier: every rank must reach it) to
        ``timings``' "wait", which tells waiting for the slowest rank apart from communication.
    """

    allreduce: str = "ring"
    op: str = "average"
    fusion_bytes: int = DEFAULT_FUSION_BYTES
    compression: str | None = None
    backward_passes_per_step: int = 1
    overflow: str = "raise"
    overlap: bool = False
    sparse_as_dense: bool = False
    measure_wait: bool = True

    def __post_init__(self) -> None:
        check_algorithm(self.allreduce)
        if self.op not in OPS:
            raise ValueError(f"DistributedOptimizer: op must be one of {OPS}, got {self.op!r}")
        k = self.backward_passes_per_step
        if isinstance(k, bool) or int(k) != k or k < 1:
            raise ValueError(f"backward_passes_per_step must be an integer >= 1, got {k!r}")
        if self.overflow not in ("raise", "skip"):
            raise ValueError(f"DistributedOptimizer: overflow must be 'raise' or 'skip', got {self.overflow!r}")
        if int(self.fusion_bytes) < 0:
            raise ValueError(f"fusion_bytes must be >= 0, got {self.fusion_bytes}")
        for name, value in (
            ("compression", _compression.check(self.compression)),
            ("fusion_bytes", int(self.fusion_bytes)),
            ("backward_passes_per_step", int(k)),
            ("overlap", bool(self.overlap)),
            ("sparse_as_dense", bool(self.sparse_as_dense)),
        ):
            object.__setattr__(self, name, value)

    @property
    def rows(self) -> bool:
        """Plan embedding gradients as rows buckets (fp16 rows are not done: those are allreduced whole)."""
        return not self.sparse_as_dense and self.compression is None

    def codes(self) -> list[tuple[str, int, Callable[[int], Any]]]:
        """The settings that must agree across ranks, as (name, integer code, decode) for ``check_layout``."""
        return [
            ("allreduce", ALGORITHMS.index(self.allreduce), lambda c: ALGORITHMS[c]),
            ("op", OPS.index(self.op), lambda c: OPS[c]),
            ("fusion_bytes", self.fusion_bytes, int),
            ("compression", int(self.compression is not None), lambda c: "fp16" if c else None),
            ("backward_passes_per_step", self.backward_passes_per_step, int),
            ("sparse_as_dense", int(self.sparse_as_dense), bool),
        ]


@dataclass(frozen=True)
class Round:
    """What the exchange of one update needs to know."""

    step: int  # updates done before this one: the step the ranks agree on
    scale: float  # the summed gradients times this: 1 / (ranks x passes) for an average
    check: bool  # compare the ranks' bucket layouts in the first allreduce of a (new) fusion plan


class Exchange:
    """One way to exchange the gradients of a fusion plan (``buckets``); ``run`` returns False when an
    fp16 sum was not finite and ``overflow="skip"`` asks to skip the update."""

    def __init__(self, comm: Any, settings: ExchangeSettings, buckets: list[Bucket], clock: ExchangeClock):
        self.comm, self.settings, self.buckets, self.clock = comm, settings, buckets, clock

    def param_ready(self, p: Tensor) -> None:
        """A parameter's gradient is final for this backward (a post-accumulate-grad hook); only overlap cares."""

    def run(self, r: Round) -> bool:
        raise NotImplementedError

    def close(self) -> None:
        pass

    def _bucket(self, k: int, r: Round, thread: str) -> bool:
        s, began = self.settings, time.perf_counter()
        finite = allreduce_buckets(
            [self.buckets[k]], self.comm, s.allreduce, r.scale, s.compression, r.check, s.overflow
        )
        self.clock.bucket(k, self.buckets[k], s.allreduce, began, thread)
        return finite


class OneRank(Exchange):
    def run(self, r: Round) -> bool:
        if r.scale != 1.0:
            for bucket in self.buckets:
                for p in bucket.params:
                    if p.grad is not None:
                        p.grad *= r.scale
        return True


class AfterBackward(Exchange):
    def run(self, r: Round) -> bool:
        agree_on_step(self.comm, r.step)
        if self.settings.measure_wait:
            self.clock.waited()
        return all([self._bucket(k, r, "main") for k in range(len(self.buckets))])  # a list: every bucket runs


class DuringBackward(Exchange):
    """The buckets go on a communication thread as backward finishes them (``param_ready``, a hook)."""

    def __init__(
        self, comm: Any, settings: ExchangeSettings, buckets: list[Bucket], clock: ExchangeClock, now: Callable
    ):
        super().__init__(comm, settings, buckets, clock)
        self.now = now  # () -> Round: this update's, asked when a bucket is launched
        self.overlap = BucketOverlap(buckets, comm, self._send, lambda: (self.now(),))
        self.finite = True

    def param_ready(self, p: Tensor) -> None:
        self.overlap.param_ready(p)

    def _send(self, k: int, r: Round) -> None:  # on the communication thread
        with activity(f"DistributedOptimizer.step (bucket {k}, communication thread)", step=r.step):
            if k == 0:
                agree_on_step(self.comm, r.step)
            self.finite &= self._bucket(k, r, "comm")

    def run(self, r: Round) -> bool:
        self.overlap.finish()
        finite, self.finite = self.finite, True
        return finite

    def close(self) -> None:
        self.overlap.close()


def make_exchange(comm: Any, settings: ExchangeSettings, buckets: list[Bucket], clock: ExchangeClock, now: Callable):
    """The strategy for this communicator and these settings."""
    if comm.Get_size() == 1:
        return OneRank(comm, settings, buckets, clock)
    if settings.overlap:
        return DuringBackward(comm, settings, buckets, clock, now)
    return AfterBackward(comm, settings, buckets, clock)
