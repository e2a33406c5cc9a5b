"""The one door to the collectives' virtual-time cluster: the seconds of one allreduce.

``allreduce_time(algorithm, p, nbytes, network, params, **options)`` asks
``collectives.allreduce_time`` (each rank's calls traced from the real algorithm code, replayed in
virtual time on a network model: links, topologies, contention, named presets). Until that is merged
this falls back to the closed-form alpha-beta-gamma cost ``collectives.cost.predict`` on a
contention-free ``crossbar`` (the two agree there: the replay's property test).

"auto" here is the algorithm the simulation finds fastest for this size and network.
"""

from __future__ import annotations

import json
from functools import lru_cache
from typing import Any

import collectives
from collectives import cost

ALGORITHMS = (*cost.ALGORITHMS, "auto")


def load_params(path: str) -> cost.CostParams:
    """Cost parameters (alpha s/message, beta s/byte, gamma s/byte) from a calibration JSON file."""
    with open(path) as f:
        data = json.load(f)
    missing = [k for k in ("alpha", "beta", "gamma") if k not in data]
    if missing:
        raise ValueError(f"{path}: not a calibration file (no {', '.join(missing)}); write one with calibrate")
    return cost.CostParams(float(data["alpha"]), float(data["beta"]), float(data["gamma"]))


def allreduce_time(
    algorithm: str, p: int, nbytes: float, network: Any = "crossbar", params: cost.CostParams | None = None, **options
) -> float:
    """Virtual seconds of one allreduce of ``nbytes`` on ``p`` ranks (the slowest rank); 0 for p = 1.

    ``options`` (None values dropped) go to the network: ``ranks_per_node``, ``topology`` ("switch", "crossbar",
    "fattree", "torus2d", "torus3d"), ``oversubscription`` and ``leaf_size`` (fat tree), ``dims`` (torus).
    """
    if p < 1:
        raise ValueError(f"allreduce_time: p must be >= 1, got {p}")
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown allreduce {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    if p == 1:
        return 0.0
    given = tuple(sorted((k, v) for k, v in options.items() if v is not None))
    if algorithm == "auto":
        return min(_cached(a, p, int(nbytes), network, params, given) for a in cost.ALGORITHMS)
    return _cached(algorithm, p, int(nbytes), network, params, given)


@lru_cache(maxsize=4096)
def _cached(algorithm: str, p: int, nbytes: int, network: Any, params: Any, options: tuple) -> float:
    replay = getattr(collectives, "allreduce_time", None)
    if replay is not None:
        return float(replay(algorithm, p, nbytes, network, params, **dict(options)))
    # fallback until collectives.allreduce_time is merged: the closed form on a crossbar (every link alike)
    if network != "crossbar" or any(k != "ranks_per_node" for k, _ in options):
        raise ValueError(f"unknown network {network!r}: only 'crossbar' until collectives.allreduce_time is merged")
    return cost.predict(algorithm, p, nbytes, params)
