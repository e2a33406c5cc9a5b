"""Every parallel scheme's step on P nodes, in virtual time: what the articles compare, projected to 16-1024 nodes.

The profile is one rank's step: forward F, backward B, update U (C = F + B + U), n gradient bytes, A bytes of
activations at a layer boundary, L layers. ``Variation`` makes ranks unequal: rank r computes f_r C in a step.

    data        DistributedOptimizer (step.py): every rank waits for the slowest, step = max_r f_r C + allreduces
    local-sgd   H local steps, then an allreduce of the parameters (local_sgd.py): a rank waits once per H steps,
                for the slowest sum; step = E[max_r sum_h f_rh] C / H + allreduce(n) / H
    ps          synchronous parameter server (parameter_server/): S server nodes beside the P workers, each
                holding n / S; the workers wait for the slowest, push (the server's one NIC receives P shards),
                the server adds P shards and updates, the workers pull (its NIC sends P shards):
                step = max_r f_r (F + B) + 2 (alpha + P (n / S) beta) + P (n / S) gamma + U / S
    ps-async    Downpour: no worker waits for another; worker r's cycle is f_r C + 2 (alpha + n beta), the
                server serves one push (receive and send n / S, add it) at a time: rate = b min(P / E[cycle],
                1 / (2 (n / S) beta + (n / S) gamma + U / S)) with the link's alpha and beta between nodes
    pipeline    P stages, m microbatches (GPipe: all forwards then all backwards; 1F1B: the same bubble, at most P
                microbatches' activations held instead of m): (m + P - 1) slots of one microbatch's stage
                compute (F + B) / (P m) and its two activation messages (alpha + A / m beta each way), then U / P;
                the bubble, the idle share of the slots, is (P - 1) / (m + P - 1)
    tensor      every layer split P ways (Megatron, model_parallel/tensor_parallel.py): compute C / P and per
                layer one allreduce of A bytes forward and one backward, or for a recurrent layer one per time
                step (k of them, A / k bytes each: the next step needs the whole state): C / P + 2 L k allreduce(A / k)

data, local-sgd and the two parameter servers scale weakly (b items per worker per step, P b per step in all);
pipeline and tensor strongly (one batch of b items split over the P nodes). The closed forms above are the
tests' (tests/test_simulate_schemes.py); the collectives inside (allreduce, gather, scatter) are the
virtual-time cluster's, so the topology and contention count.

Singh, "Scaling in the Deep Learning Applications", 2017, weighs synchronous against asynchronous training: the
synchronous step is as slow as its slowest worker; ``Variation`` shows by how much, and ps-async and
local-sgd, which do not wait (or wait once per H steps), what they win back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from minidl.simulate.profile import Profile

SCHEMES = ("data", "local-sgd", "ps", "ps-async", "pipeline", "tensor")
STRONG = ("pipeline", "tensor")  # one batch split over the nodes; the others: a batch per worker


@dataclass(frozen=True)
class Variation:
    """Each rank's compute in a step is f C, f drawn independently per rank and step:

        f = J x (``slowdown`` with probability ``straggler``, else 1),   J lognormal with mean 1 and CV ``jitter``

    (J = 1 without jitter). ``draws`` steps are drawn with ``seed``: the expectations below are their means.
    """

    jitter: float = 0.0
    straggler: float = 0.0  # probability that a rank is a straggler in a step
    slowdown: float = 1.0  # how many times as long a straggler computes
    draws: int = 200
    seed: int = 0

    def __post_init__(self) -> None:
        if not (self.jitter >= 0 and 0 <= self.straggler <= 1 and self.slowdown >= 1 and self.draws >= 1):
            raise ValueError(
                f"variation: jitter >= 0, 0 <= straggler <= 1, slowdown >= 1 and draws >= 1, got jitter "
                f"{self.jitter}, straggler {self.straggler}, slowdown {self.slowdown}, draws {self.draws}"
            )

    @property
    def none(self) -> bool:
        return self.jitter == 0 and (self.straggler == 0 or self.slowdown == 1)

    def factors(self, p: int, steps: int = 1) -> np.ndarray:
        """f for ``draws`` x p ranks x ``steps`` steps, shape (draws, p, steps)."""
        rng = np.random.default_rng(self.seed)
        shape = (self.draws, p, steps)
        f = np.ones(shape)
        if self.jitter:
            sigma2 = np.log1p(self.jitter**2)  # lognormal: mean exp(mu + sigma^2/2) = 1, CV sqrt(e^sigma^2 - 1)
            f = rng.lognormal(-sigma2 / 2, np.sqrt(sigma2), shape)
        if self.straggler and self.slowdown != 1:
            f = f * np.where(rng.random(shape) < self.straggler, self.slowdown, 1.0)
        return f

    def wait(self, p: int, steps: int = 1) -> float:
        """E[max over the p ranks of the mean f over ``steps`` steps]: what a step waits for in compute units."""
        return 1.0 if self.none else _wait(self, p, steps)

    def mean(self) -> float:
        """E[f]: a rank that waits for no one computes at this pace."""
        return 1.0 + (self.straggler * (self.slowdown - 1) if self.slowdown != 1 else 0.0)


@lru_cache(maxsize=256)
def _wait(v: Variation, p: int, steps: int) -> float:
    return float(v.factors(p, steps).mean(axis=2).max(axis=1).mean())


@dataclass(frozen=True)
class Scheme:
    """Which scheme (SCHEMES) and its settings; ``algorithm`` is the allreduce where the scheme has one."""

    parallel: str = "data"
    algorithm: str = "ring"
    overlap: bool = False
    servers: int = 1  # ps, ps-async: server nodes beside the workers
    local_steps: int = 8  # local-sgd: H
    microbatches: int = 8  # pipeline: m
    schedule: str = "1f1b"  # pipeline: gpipe or 1f1b (the same time; 1F1B holds fewer activations)
    variation: Variation = field(default_factory=Variation)

    def __post_init__(self) -> None:
        if self.parallel not in SCHEMES:
            raise ValueError(f"unknown scheme {self.parallel!r}: expected one of {', '.join(SCHEMES)}")
        if self.schedule not in ("gpipe", "1f1b"):
            raise ValueError(f"pipeline schedule must be gpipe or 1f1b, got {self.schedule!r}")
        for name in ("servers", "local_steps", "microbatches"):
            if int(getattr(self, name)) != getattr(self, name) or getattr(self, name) < 1:
                raise ValueError(f"{name.replace('_', '-')}: must be a positive integer, got {getattr(self, name)}")

    @property
    def weak(self) -> bool:
        return self.parallel not in STRONG

    @property
    def label(self) -> str:
        extra = {
            "data": self.algorithm,
            "local-sgd": f"H={self.local_steps}",
            "ps": f"S={self.servers}",
            "ps-async": f"S={self.servers}",
            "pipeline": f"{self.schedule} m={self.microbatches}",
            "tensor": self.algorithm,
        }[self.parallel]
        return f"{self.parallel} {extra}"


def bubble(stages: int, microbatches: int) -> float:
    """The idle share of a pipeline's slots: (p - 1) / (m + p - 1) (GPipe, Huang et al. 2019; 1F1B alike)."""
    return (stages - 1) / (microbatches + stages - 1)


def slowest(profile: Profile, factor: float) -> Profile:
    """The profile of a rank that computes ``factor`` times as long (the one the others wait for)."""
    return profile if factor == 1.0 else profile.scaled(1.0 / factor)


# -- the steps (step.py's Cluster: allreduce_s, link(), ranks) ----------------------------------------------
def scheme_step(profile: Profile, cluster: Any, scheme: Scheme) -> tuple[float, float]:
    """(compute, exposed communication) seconds of one step of ``scheme`` (not "data": step.py) on ``cluster``.

    For ps-async, whose workers keep no common step, the step is P b over the cluster's rate (module doc).
    """
    steps = {
        "local-sgd": _local_sgd,
        "ps": _ps,
        "ps-async": _ps_async,
        "pipeline": _pipeline,
        "tensor": _tensor,
    }
    if scheme.parallel not in steps:
        raise ValueError(f"scheme_step: {scheme.parallel!r} is step.py's (simulate_step)")
    return steps[scheme.parallel](profile, cluster, scheme)


def _local_sgd(profile: Profile, cluster: Any, s: Scheme) -> tuple[float, float]:
    H, p = s.local_steps, cluster.ranks
    compute = profile.compute_s * s.variation.wait(p, H)
    return compute, cluster.allreduce_s(s.algorithm, profile.gradient_bytes) / H


def _ps(profile: Profile, cluster: Any, s: Scheme) -> tuple[float, float]:
    W, shard, c = cluster.ranks, profile.gradient_bytes / s.servers, cluster.link()
    server = W * shard * c.gamma + profile.update_s / s.servers
    compute = (profile.forward_s + profile.backward_s) * s.variation.wait(W)
    exchange = 2 * (c.alpha + W * shard * c.beta)  # the server's one NIC: W shards in, W shards out
    return compute, exchange + server


def _ps_async(profile: Profile, cluster: Any, s: Scheme) -> tuple[float, float]:
    W, shard, c = cluster.ranks, profile.gradient_bytes / s.servers, cluster.link()
    work = (profile.forward_s + profile.backward_s) * s.variation.mean()
    cycle = work + 2 * (c.alpha + profile.gradient_bytes * c.beta)
    service = 2 * shard * c.beta + shard * c.gamma + profile.update_s / s.servers  # one push at the server
    step = max(cycle, W * service)  # W workers' pushes per "step": the server's pace caps them
    return work, step - work


def _pipeline(profile: Profile, cluster: Any, s: Scheme) -> tuple[float, float]:
    P, m, c = cluster.ranks, s.microbatches, cluster.link()
    stage = (profile.forward_s + profile.backward_s) / (P * m) * s.variation.wait(P)
    send = 0.0 if P == 1 else 2 * (c.alpha + profile.activation_bytes / m * c.beta)  # forward and backward
    slots = m + P - 1
    compute = slots * stage + profile.update_s / P
    return compute, slots * send


def _tensor(profile: Profile, cluster: Any, s: Scheme) -> tuple[float, float]:
    P, k = cluster.ranks, profile.sequential
    compute = profile.compute_s / P * s.variation.wait(P)
    return compute, 2 * profile.layers * k * cluster.allreduce_s(s.algorithm, profile.activation_bytes / k)
