"""A node of the simulated cluster, relative to the rank that was profiled here.

The profile is one rank on one core of this machine (one BLAS thread). A node has ``cores`` cores, each
``core_speed`` times as fast as this machine's, and runs ``ranks_per_node`` ranks; each rank trains its own
batch with its share of the cores, ``cores / ranks_per_node``, at ``efficiency`` (how much of the ideal
speed-up a rank gets from its cores: threading, memory bandwidth; and below 1 core per rank, the share of
time it gets). So one rank computes

    speedup = core_speed * efficiency * cores / ranks_per_node

times as fast as the profiled one, and every compute time of the profile is divided by it. The defaults
(one rank per core, same cores, efficiency 1) change nothing.
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

    def __post_init__(self) -> None:
        checks = {
            "--ranks-per-node": (self.ranks_per_node, int(self.ranks_per_node) == self.ranks_per_node >= 1),
            "--cores-per-node": (self.cores, self.cores is None or int(self.cores) == self.cores >= 1),
            "--core-speed": (self.core_speed, self.core_speed > 0),
            "--efficiency": (self.efficiency, 0 < self.efficiency),
        }
        for flag, (value, ok) in checks.items():
            if not ok:
                raise ValueError(f"{flag}: must be positive{' integer' if 'node' in flag else ''}, got {value}")

    @property
    def node_cores(self) -> int:
        return self.ranks_per_node if self.cores is None else int(self.cores)

    @property
    def rank_speedup(self) -> float:
        """How many times as fast as the profiled rank one rank of this node computes."""
        return self.core_speed * self.efficiency * self.node_cores / self.ranks_per_node

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
