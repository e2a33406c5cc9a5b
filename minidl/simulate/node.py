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
machine while it was profiled; None, the default, keeps the formula above). A rank never leaves its core: it computes, or it waits in MPI by
busy-polling (MPICH's shared-memory progress), so every rank is always runnable, and the OS shares the
cores fairly among the ranks and the load. A single-threaded rank then gets

    share(k) = min(1, cores / (k + load))   of a core, with k = ranks_per_node,

and the profiled rank got share(1) (profiled here, alone, under the same load), so with a load

    speedup = core_speed * efficiency * share(ranks_per_node) / share(1)

which is cores / ranks_per_node again with load 0 and more ranks than cores (then every compute time is
stretched by ranks / cores: compute shares the cores).
"""

from __future__ import annotations

from dataclasses import dataclass

from minidl.simulate.profile import Profile


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
        if self.load is None:
            return self.core_speed * self.efficiency * self.node_cores / self.ranks_per_node
        share = min(1.0, self.node_cores / (self.ranks_per_node + self.load))
        return self.core_speed * self.efficiency * share / min(1.0, self.node_cores / (1 + self.load))

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
