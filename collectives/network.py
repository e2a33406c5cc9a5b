"""The network of the virtual-time cluster: links, topologies and named presets.

A message of n bytes from rank i to rank j costs its path's latency alpha, then n bytes at the
rate its links give it (Hockney's alpha + n beta when it has the links to itself); a reduction of
n bytes costs n gamma (collectives/cost.py's CostParams). ``Network.fabric(p)`` places p ranks and
answers, for each pair, the path: (latency, the links it crosses, the most one flow may take).

    crossbar      every pair has its own wire: no contention, alpha + n beta exactly (cost.py's model)
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectives.cost import CostParams, get_params


@dataclass(frozen=True)
class Path:
    """What a message from one rank to another crosses."""

    latency: float  # seconds before the first byte arrives (alpha)
    links: tuple[int, ...]  # ids of the shared links it loads (empty: it shares nothing)
    rate: float  # bytes/s the message may take at most (1 / beta of its slowest hop; inf: no limit)


class Fabric:
    """A network with p ranks placed on it: ``path(src, dst)`` and the links' capacities (bytes/s)."""

    def __init__(self, p: int, gamma: float, capacity: np.ndarray | None = None):
        self.p, self.gamma = p, gamma
        self.capacity = np.zeros(0) if capacity is None else np.asarray(capacity, dtype=float)
        self.link_names: list[str] = []

    @property
    def contention(self) -> bool:
        """Whether messages can share links (False: every message gets its path's rate, as in cost.py)."""
        return self.capacity.size > 0

    def path(self, src: int, dst: int) -> Path:
        raise NotImplementedError


class _CrossbarFabric(Fabric):
    def __init__(self, p: int, params: CostParams):
        super().__init__(p, params.gamma)
        self._path = Path(params.alpha, (), 1.0 / params.beta if params.beta > 0 else np.inf)

    def path(self, src: int, dst: int) -> Path:
        return self._path


class Network:
    """A network description, independent of p; ``fabric(p)`` builds it for p ranks."""

    name = "network"
    params: CostParams

    def fabric(self, p: int) -> Fabric:
        raise NotImplementedError

    def describe(self) -> str:
        c = self.params
        return f"{self.name}: alpha {c.alpha * 1e6:.3g} us, beta {c.beta * 1e9:.3g} ns/B ({1e-9 / c.beta if c.beta else np.inf:.3g} GB/s), gamma {c.gamma * 1e9:.3g} ns/B"


class Crossbar(Network):
    """Every pair of ranks has a wire of its own: a message costs alpha + n beta whatever else is sent."""

    name = "crossbar"

    def __init__(self, params: CostParams | None = None):
        self.params = params or get_params()

    def fabric(self, p: int) -> Fabric:
        return _CrossbarFabric(p, self.params)


def get_network(network: str | Network, params: CostParams | None = None) -> Network:
    """``network`` as a Network: a name ("crossbar" or a preset) or a Network object, returned as it is."""
    if isinstance(network, Network):
        return network
    if network == "crossbar":
        return Crossbar(params)
    raise ValueError(f"unknown network {network!r}: expected a Network or one of {', '.join(known_networks())}")


def known_networks() -> list[str]:
    return ["crossbar"]
