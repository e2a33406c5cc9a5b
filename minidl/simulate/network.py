"""The one door to the collectives' virtual-time cluster: the seconds of one allreduce.

``allreduce_time(algorithm, p, nbytes, network, params, **options)`` is
``collectives.allreduce_time`` (traces of the real algorithms replayed on a network model: links,
topologies, contention, named presets such as "10gbe" or "ib-edr"). Until that module is merged
this falls back to the closed-form alpha-beta-gamma cost ``collectives.cost.predict`` on a
contention-free ``crossbar`` (the two agree there by construction: the replay's property test).

"auto" is the algorithm the model predicts fastest for this size, as ``collectives.allreduce``'s
"auto" picks it from the cost model.
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
    """Virtual seconds of one allreduce of ``nbytes`` on ``p`` ranks (the slowest rank); 0 for p = 1."""
    if p < 1:
        raise ValueError(f"allreduce_time: p must be >= 1, got {p}")
    if p == 1:
        return 0.0
    if algorithm == "auto":
        return min(allreduce_time(a, p, nbytes, network, params, **options) for a in cost.ALGORITHMS)
    if algorithm not in cost.ALGORITHMS:
        raise ValueError(f"unknown allreduce {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    return _cached(algorithm, p, int(nbytes), network, params, tuple(sorted(options.items())))


@lru_cache(maxsize=4096)
def _cached(algorithm: str, p: int, nbytes: int, network: Any, params: Any, options: tuple) -> float:
    replay = getattr(collectives, "allreduce_time", None)
    if replay is not None:
        return float(replay(algorithm, p, nbytes, network=network, params=params, **dict(options)))
    # fallback until collectives.allreduce_time is merged: the closed form on a crossbar (where every link is
    # alike, so ranks_per_node changes nothing)
    if network != "crossbar" or any(k != "ranks_per_node" for k, _ in options):
        raise NotImplementedError(
            f"network {network!r} with {dict(options)} needs collectives.allreduce_time (the network simulator); "
            "only the closed-form crossbar is available"
        )
    return cost.predict(algorithm, p, nbytes, params)
