"""The one door to the collectives' virtual-time cluster: the seconds of one allreduce.

``allreduce_time(algorithm, p, nbytes, network, params, **options)`` asks
``collectives.allreduce_time``: each rank's calls traced from the real algorithm code and replayed in
virtual time on a network model (named links with their sources, topologies, nodes of several ranks,
max-min fair contention; ``crossbar`` is cost.py's closed form exactly). Results are cached.

"auto" here is the algorithm the simulation finds fastest for this size and network, as
``collectives.allreduce_time("auto", ...)`` finds it, or, on nodes of several ranks, one of the two
hierarchical schedules where the simulation finds it faster still (what a real run's "auto" picks is
``collectives.auto.choose_algorithm``: the cost model, with the routes' link latency when given). "hierarchical"
(reduce to each node's leader, ring among the leaders, broadcast inside) and "hierarchical_rs" (reduce-scatter
inside, each block across the nodes, allgather inside) are collectives/algorithms/hierarchical.py's two schedules
on nodes of ``ranks_per_node`` ranks (the simulated cluster's nodes).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np

import collectives
from collectives import cost

HIERARCHICAL = ("hierarchical", "hierarchical_rs")  # on the cluster's nodes of ranks_per_node ranks
ALGORITHMS = (*cost.ALGORITHMS, *HIERARCHICAL, "auto")


def allreduce_time(
    algorithm: str, p: int, nbytes: float, network: Any = "crossbar", params: cost.CostParams | None = None, **options
) -> float:
    """Virtual seconds of one allreduce of ``nbytes`` on ``p`` ranks (the slowest rank); 0 for p = 1.

    ``options`` (None values dropped) go to the network: ``ranks_per_node``, ``topology`` ("switch", "crossbar",
    "fattree", "dragonfly", "torus", "torus2d", "torus3d"), ``oversubscription``, ``leaf_size``, ``routing``,
    ``pod_size`` and ``spine_oversubscription`` (fat tree), ``router_size`` and ``group_size`` (dragonfly), ``dims``.
    """
    if p < 1:
        raise ValueError(f"allreduce_time: p must be >= 1, got {p}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    if p == 1:
        return 0.0
    given = tuple(sorted((k, v) for k, v in options.items() if v is not None))
    if algorithm == "auto":  # collectives' simulated minimum, and on nodes of several ranks the node-aware two
        names = ("auto", *HIERARCHICAL) if (options.get("ranks_per_node") or 1) > 1 else ("auto",)
        return min(_cached(name, p, _float32s(nbytes), network, params, given) for name in names)
    return _cached(algorithm, p, _float32s(nbytes), network, params, given)


def collective_time(
    call: str, p: int, nbytes: float, network: Any = "crossbar", params: cost.CostParams | None = None, **options
) -> float:
    """Virtual seconds of any traceable call (``collectives.virtual_time.trace.calls()``: "allgather:ring", ...) of
    ``nbytes`` per rank on ``p`` ranks, without its agreement check; 0 for p = 1. ``options`` as allreduce_time's."""
    if p < 1:
        raise ValueError(f"collective_time: p must be >= 1, got {p}")
    if p == 1:
        return 0.0
    return _cached(
        call, p, _float32s(nbytes), network, params, tuple(sorted((k, v) for k, v in options.items() if v is not None))
    )


def _float32s(nbytes: float) -> int:
    """``nbytes`` rounded up to whole float32 values (the traced vectors are float32; a computed size may not be)."""
    return 4 * -(-int(np.ceil(nbytes)) // 4)


@lru_cache(maxsize=4096)
def _cached(algorithm: str, p: int, nbytes: int, network: Any, params: Any, options: tuple) -> float:
    return float(collectives.allreduce_time(algorithm, p, nbytes, network, params, **dict(options)))
