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
runnable. The OS spreads the k runnable tasks over the c cores as evenly as it can, so the busiest core holds
ceil(k / c) of them and shares its time among them; a rank that finishes its compute first busy-polls and
keeps its core, so the ranks of the busiest core are not helped by it, and a synchronous step waits for them.
The slowest rank gets

    share(k) = 1 / ceil(k / c)   of a core (1 while k <= c), with k = ranks_per_node + load (load rounded),

and the profiled rank got share(1) (profiled here, alone, under the same load), so

    speedup = core_speed * efficiency * share(ranks_per_node + load) / share(1 + load).

With more ranks than cores this replaces cores / ranks_per_node: 3 ranks on 2 cores compute at half speed,
not two thirds (measured here: docs/simulator-validation.md). ``efficiency`` is then what ranks running at
once on the node's cores cost each other (memory bandwidth, shared caches): measure it as one rank's compute
time alone over its time while the other cores run ranks too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from minidl.simulate.profile import Profile


def share(tasks: int, cores: int) -> float:
    """The share of a core the slowest of ``tasks`` always-runnable single-threaded tasks gets on ``cores``."""
    return 1.0 / max(1, math.ceil(tasks / cores))


@dataclass(frozen=True)
class NodeSpec:
    """Cores per node (default: one per rank), per-core speed relative to here, efficiency, ranks per node."""

    ranks_per_node: int = 1
    cores: int | None = None
    core_speed: float = 1.0
    efficiency: float = 1.0
    load: float | None = None  # runnable processes besides single-threaded ranks (module doc); None: no such model

    def __post_init__(self) -> None:
        checks = {
            "--ranks-per-node": (self.ranks_per_node, int(self.ranks_per_node) == self.ranks_per_node >= 1),
            "--cores-per-node": (self.cores, self.cores is None or int(self.cores) == self.cores >= 1),
            "--core-speed": (self.core_speed, self.core_speed > 0),
            "--efficiency": (self.efficiency, 0 < self.efficiency),
            "load": (self.load, self.load is None or self.load >= 0),
        }
        for flag, (value, ok) in checks.items():
            if not ok:
                sign = "non-negative" if flag == "load" else "positive"
                raise ValueError(f"{flag}: must be {sign}{' integer' if 'node' in flag else ''}, got {value}")

    @property
    def node_cores(self) -> int:
        return self.ranks_per_node if self.cores is None else int(self.cores)

    @property
    def rank_speedup(self) -> float:
        """How many times as fast as the profiled rank one rank of this node computes."""
        c, k = self.node_cores, self.ranks_per_node
        if self.load is None:
            return self.core_speed * self.efficiency * (c / k if k <= c else share(k, c))
        load = round(self.load)
        return self.core_speed * self.efficiency * share(k + load, c) / share(1 + load, c)

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
