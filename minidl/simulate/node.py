"""A node of the simulated cluster, relative to the rank that was profiled here.

The profile is one rank on one core of this machine (one BLAS thread). A node has ``cores`` cores, each
``core_speed`` times as fast as this machine's, and runs ``ranks_per_node`` ranks; each rank trains its own
batch with its share of the cores, ``cores / ranks_per_node``, at ``efficiency`` (how much of the ideal
speed-up a rank gets from its cores: threading, memory bandwidth; and below 1 core per rank, the share of
time it gets). So one rank computes

    speedup = core_speed * efficiency * cores / ranks_per_node

times as fast as the profiled one, and every compute time of the profile is divided by it. The defaults
(one rank per core, same cores, efficiency 1) change nothing.

Ranks beyond the cores, and other work (``load``: runnable processes that are not ranks, as on this
machine while it was profiled; None, the default, counts the ranks alone). A rank never leaves its core: it
computes, or it waits in MPI by busy-polling (MPICH's shared-memory progress), so every rank is always
runnable, and the OS shares the cores fairly among the ranks and the load. A single-threaded rank gets

    share(k) = min(1, c / k)   of a core, with k = ranks_per_node + load,

and while it time-shares a core (k > c) it keeps only ``sharing`` of that share's speed: each switch
between ranks refills the caches. The profiled rank got share(1 + load) (profiled here, alone, under the
same load), so

    speedup = core_speed * efficiency * share(ranks_per_node + load) s(ranks_per_node + load)
              / (share(1 + load) s(1 + load)),     s(k) = sharing if k > c else 1,

which is cores / ranks_per_node again with no load and sharing 1. ``efficiency`` is what ranks running at
once on the node's cores cost each other (memory bandwidth, shared caches), ``sharing`` what time-sharing
a core costs; benchmarks/simulate_validation.py measures both here (one profile alone against one per core
at once, and against two pinned to one core) and docs/simulator-validation.md shows why both matter: with
3 and 4 ranks on 2 cores the slowest rank computed 1.6-1.9x and 2.3-2.5x as long as one rank alone, where
the fair share alone says 1.5x and 2x.
"""

from __future__ import annotations

from dataclasses import dataclass

from minidl.simulate.profile import Profile


def share(tasks: float, cores: int) -> float:
    """The share of a core each of ``tasks`` always-runnable single-threaded tasks gets on ``cores``: fair."""
    return min(1.0, cores / tasks)


@dataclass(frozen=True)
class NodeSpec:
    """Cores per node (default: one per rank), per-core speed relative to here, efficiency, ranks per node."""

    ranks_per_node: int = 1
    cores: int | None = None
    core_speed: float = 1.0
    efficiency: float = 1.0
    load: float | None = None  # runnable processes besides single-threaded ranks (module doc); None: no such model
    sharing: float = 1.0  # the speed a rank keeps while it time-shares a core (module doc)

    def __post_init__(self) -> None:
        checks = {
            "--ranks-per-node": (self.ranks_per_node, int(self.ranks_per_node) == self.ranks_per_node >= 1),
            "--cores-per-node": (self.cores, self.cores is None or int(self.cores) == self.cores >= 1),
            "--core-speed": (self.core_speed, self.core_speed > 0),
            "--efficiency": (self.efficiency, 0 < self.efficiency),
            "load": (self.load, self.load is None or self.load >= 0),
            "sharing": (self.sharing, 0 < self.sharing <= 1),
        }
        for flag, (value, ok) in checks.items():
            if not ok:
                sign = {"load": "non-negative", "sharing": "in (0, 1]"}.get(flag, "positive")
                raise ValueError(f"{flag}: must be {sign}{' integer' if 'node' in flag else ''}, got {value}")

    @property
    def node_cores(self) -> int:
        return self.ranks_per_node if self.cores is None else int(self.cores)

    @property
    def rank_speedup(self) -> float:
        """How many times as fast as the profiled rank one rank of this node computes."""
        c, k, load = self.node_cores, self.ranks_per_node, self.load or 0.0
        if self.load is None and k <= c:
            return self.core_speed * self.efficiency * c / k  # threads: a rank may use several cores
        speed = lambda tasks: share(tasks, c) * (self.sharing if tasks > c else 1.0)  # noqa: E731
        return self.core_speed * self.efficiency * speed(k + load) / speed(1 + load)

    def apply(self, profile: Profile) -> Profile:
        return profile if self.rank_speedup == 1.0 else profile.scaled(self.rank_speedup)

    def describe(self, profile: Profile) -> str:
        """What was scaled, with the numbers before and after."""
        s = self.rank_speedup
        head = (
            f"node: {self.node_cores} core(s) x speed {self.core_speed:g} x efficiency {self.efficiency:g}, "
            f"{self.ranks_per_node} rank(s) per node"
        )
        if s == 1.0:
            return f"{head}: compute as measured (no scaling)"
        after = self.apply(profile)
        return (
            f"{head}: each rank computes {s:.3g}x as fast as the profiled one, step compute "
            f"{1e3 * profile.compute_s:.1f} ms -> {1e3 * after.compute_s:.2f} ms, "
            f"{profile.items / profile.compute_s:,.0f} -> {after.items / after.compute_s:,.0f} {profile.unit}/s per rank"
        )
