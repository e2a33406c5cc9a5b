"""The network of the virtual-time cluster: links, topologies and named presets.

A message of n bytes from rank i to rank j costs its path's latency, then n bytes at the rate its
links give it (Hockney's alpha + n beta when it has the links to itself); a reduction of n bytes
costs n gamma (collectives/cost.py's CostParams). The latency is the software's alpha (MPI and
Python per message) plus ``link_latency`` for every link of the route (topology.py's hops: 2 on a
switch, 2, 4 or 6 on a fat tree, one per hop on a torus), as SimGrid's CM02 model sums its links'
latencies. ``Network.fabric(p)`` places p ranks and answers, for each pair, the path: (latency,
the links it crosses, the most one flow may take), and ``hops(src, dst)``.

    crossbar      every pair has its own wire: no contention, alpha + n beta exactly (cost.py's model)
    Cluster(link, topology, ranks_per_node, ...)   nodes of several ranks on a topology (topology.py)
    "10gbe", "ib-hdr", ...                         Cluster(that link): LINKS below, with their sources

Contention: messages that share a link share its bandwidth max-min fairly (flows.py).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from collectives.cost import CostParams, get_params
from collectives.virtual_time.topology import check_options, make_topology


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

    def hops(self, src: int, dst: int) -> int:
        """Links a message from rank src to rank dst crosses (0 within a node; 2 on a crossbar)."""
        return 2 if src != dst else 0


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


class CrossbarNetwork(Network):
    """Every pair of ranks has a wire of its own: a message costs alpha + n beta whatever else is sent."""

    name = "crossbar"

    def __init__(self, params: CostParams | None = None):
        self.params = params or get_params()

    def fabric(self, p: int) -> Fabric:
        return _CrossbarFabric(p, self.params)


# -- named links ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Link:
    """A kind of link: MPI's small-message latency (s) and its large-message bandwidth (bytes/s)."""

    name: str
    alpha: float
    bandwidth: float

    @property
    def beta(self) -> float:
        return 1.0 / self.bandwidth


# alpha: a typical MPI ping-pong latency (OSU osu_latency, half the round trip) for the fabric as
# vendors and published measurements give it, an order of magnitude rather than a promise; beta:
# 1 / the data rate after line encoding (the most osu_bw can show). Not measured here, except
# "shm". For minidl itself add its Python work per message (some microseconds: see cost.py).
LINKS = {
    # IEEE 802.3ab, 1 Gb/s; TCP payload of 1500-byte frames 1448/1538 of it: 117.7 MB/s. MPI over
    # kernel TCP: osu_latency typically 25-50 us.
    "1gbe": Link("1GbE", 40e-6, 117.7e6),
    # IEEE 802.3ae, 10 Gb/s -> 1.18 GB/s of TCP payload; kernel TCP osu_latency typically 10-15 us.
    "10gbe": Link("10GbE", 12e-6, 1.18e9),
    # IEEE 802.3by, 25 Gb/s -> 2.94 GB/s of TCP payload; kernel TCP osu_latency typically 5-10 us.
    "25gbe": Link("25GbE", 7e-6, 2.94e9),
    # InfiniBand FDR 4x: 4 x 14.0625 Gb/s, 64b/66b -> 6.82 GB/s; Mellanox ConnectX-3 spec: 0.7 us.
    "ib-fdr": Link("InfiniBand FDR", 0.7e-6, 6.82e9),
    # InfiniBand EDR 4x: 4 x 25.78125 Gb/s, 64b/66b -> 12.5 GB/s; ConnectX-4 spec: 0.6 us.
    "ib-edr": Link("InfiniBand EDR", 0.6e-6, 12.5e9),
    # InfiniBand HDR 4x: 4 x 53.125 Gb/s PAM4, 64b/66b -> 25 GB/s; ConnectX-6 spec: 0.6 us.
    "ib-hdr": Link("InfiniBand HDR", 0.6e-6, 25.0e9),
    # Intel Omni-Path 100: 4 x 25.78125 Gb/s, 64b/66b -> 12.5 GB/s; Intel's published MPI latency ~0.9-1 us.
    "omnipath100": Link("Omni-Path 100", 0.95e-6, 12.5e9),
    # Shared memory within a node: what cost.calibrate measured for minidl's collectives on the
    # development machine (MPICH shared memory, mpi4py, Python work included): cost.DEFAULT.
    "shm": Link("shared memory", 5e-6, 1 / 3e-10),
}
ALIASES = {
    "fdr": "ib-fdr",
    "edr": "ib-edr",
    "hdr": "ib-hdr",
    "infiniband-fdr": "ib-fdr",
    "infiniband-edr": "ib-edr",
    "infiniband-hdr": "ib-hdr",
    "opa100": "omnipath100",
    "omni-path-100": "omnipath100",
    "shared-memory": "shm",
}


class _ClusterFabric(Fabric):
    def __init__(self, p: int, net: Cluster):
        nodes = -(-p // net.ranks_per_node)
        self.topology = make_topology(net.topology, nodes, net.link.bandwidth, **net.options)
        super().__init__(p, net.params.gamma, self.topology.capacity)
        self.ranks_per_node, self.link_latency = net.ranks_per_node, net.link_latency
        self.rtt_sharing = net.sharing == "rtt"  # flows.weights_of
        self._intra = Path(net.intra.alpha, (), net.intra.bandwidth)
        self._alpha, self._rate = net.link.alpha, net.link.bandwidth

    def path(self, src: int, dst: int) -> Path:
        a, b = src // self.ranks_per_node, dst // self.ranks_per_node
        if a == b:
            return self._intra
        latency = self._alpha + self.link_latency * self.topology.hops(a, b)
        return Path(latency, self.topology.route(a, b), self._rate)

    def hops(self, src: int, dst: int) -> int:
        a, b = src // self.ranks_per_node, dst // self.ranks_per_node
        return 0 if a == b else self.topology.hops(a, b)


class Cluster(Network):
    """Nodes of ``ranks_per_node`` ranks each (consecutive ranks share a node, as mpiexec places them),
    joined by ``link`` on ``topology`` (topology.py; ``options`` such as leaf_size, oversubscription,
    dims go to it). Ranks of one node talk through ``intra`` (default shared memory) without
    contention; between nodes a message pays link.alpha (the software's, per message), plus
    ``link_latency`` seconds per link of its route, and shares the links of its route: max-min
    fairly (``sharing="maxmin"``), or in proportion to 1 / its latency (``"rtt"``, SimGrid's CM02). gamma
    (the CPUs' reduction speed) comes from ``params`` (default cost.get_params()).
    """

    def __init__(
        self,
        link: str | Link = "10gbe",
        topology: str = "switch",
        ranks_per_node: int = 1,
        intra: str | Link = "shm",
        params: CostParams | None = None,
        link_latency: float = 0.0,
        sharing: str = "maxmin",
        **options,
    ):
        if not isinstance(ranks_per_node, (int, np.integer)) or ranks_per_node < 1:
            raise ValueError(f"ranks_per_node must be a positive integer, got {ranks_per_node!r}")
        if isinstance(link_latency, bool) or not isinstance(link_latency, (int, float)) or not link_latency >= 0:
            raise ValueError(f"link_latency must be a non-negative number of seconds, got {link_latency!r}")
        self.link_latency = float(link_latency)
        if sharing not in ("maxmin", "rtt"):
            raise ValueError(
                f"sharing must be 'maxmin' (equal shares) or 'rtt' (1 / latency, as CM02), got {sharing!r}"
            )
        self.sharing = sharing
        check_options(topology, options)  # an unknown topology or option: one line, before any fabric is built
        self.link, self.intra = get_link(link), get_link(intra)
        self.topology, self.ranks_per_node, self.options = topology, int(ranks_per_node), options
        gamma = (params or get_params()).gamma
        self.params = CostParams(self.link.alpha, self.link.beta, gamma)
        self.name = f"{self.link.name} ({topology}, {ranks_per_node} rank{'s' * (ranks_per_node > 1)} per node)"

    def fabric(self, p: int) -> Fabric:
        return _ClusterFabric(p, self)

    def describe(self) -> str:
        """One line: the link between nodes, the topology and its options, the nodes, gamma."""
        options = "".join(f", {k} {v}" for k, v in sorted(self.options.items()))
        inside = f"; {self.intra.name} within a node ({_speed(self.intra)})" if self.ranks_per_node > 1 else ""
        hop = f", {self.link_latency * 1e6:.3g} us per link" if self.link_latency else ""
        return (
            f"{self.link.name} ({_speed(self.link)}{hop}), {self.topology}{options}, {self.ranks_per_node} rank(s) per "
            f"node{inside}; gamma {self.params.gamma * 1e9:.3g} ns/B"
        )


def _speed(link: Link) -> str:
    return f"alpha {link.alpha * 1e6:.3g} us, {link.bandwidth / 1e9:.3g} GB/s"


def get_link(name: str | Link) -> Link:
    if isinstance(name, Link):
        return name
    key = ALIASES.get(name.lower(), name.lower())
    if key not in LINKS:
        raise ValueError(f"unknown network {name!r}: expected a Network or one of {', '.join(known_networks())}")
    return LINKS[key]


def get_network(network: str | Network, params: CostParams | None = None, **options) -> Network:
    """``network`` as a Network: "crossbar" (cost.py's model, ``params``), a named link (LINKS, on
    ``Cluster``'s topology and options), or a Network object, returned as it is.

    Calibrated constants apply to the link they were measured on: ``params`` (what calibrate measured
    among the ranks of this machine) are the link within a node as well as between "crossbar" nodes;
    for a named link they are the link within a node (its own constants between nodes). Without
    ``params`` a node's ranks talk through "shm" (cost.DEFAULT, measured on the development machine).
    """
    if isinstance(network, Network):
        if options:
            raise ValueError(f"options {sorted(options)} apply to a named network, not to a Network object")
        return network
    if network == "crossbar" and not options:
        return CrossbarNetwork(params)
    if network == "crossbar":  # the model's alpha and beta between the nodes and within them
        c = params or get_params()
        link = Link("crossbar", c.alpha, 1 / c.beta if c.beta else np.inf)
        return Cluster(link, params=params, **{"topology": "crossbar", "intra": link, **options})
    if params is not None and "intra" not in options:  # measured here, by calibrate: the link within a node
        options["intra"] = Link("calibrated", params.alpha, 1 / params.beta if params.beta else np.inf)
    return Cluster(get_link(network), params=params, **options)


def known_networks() -> list[str]:
    return ["crossbar", *LINKS]
