"""Topologies: which links a message between two nodes crosses, and what each link carries (bytes/s).

Links are one-way (full duplex: a node's uplink and downlink are two links). Every node has a NIC:
an uplink (its injection) and a downlink (its ejection), of the link's bandwidth B.

    crossbar   no shared links at all (every pair of nodes has its own wire)
    switch     one non-blocking switch: a message crosses the sender's uplink and the receiver's
               downlink, so only the NICs are shared (a root receiving from everyone shares its downlink)
    fattree    two levels: leaves of ``leaf_size`` nodes, each leaf's uplink to the spine and downlink
               from it carrying leaf_size B / ``oversubscription`` (1: full bisection; 4: a quarter of it);
               a message between leaves crosses up, leaf up, leaf down, down
    torus2d    nodes on a 2-D (torus3d: 3-D) torus, dims as near equal as the node count allows (or
               ``dims``); dimension-order routing the short way round (on a tie as SimGrid), the last
               (fastest-varying) coordinate first as in SimGrid's TORUS, each hop a link of bandwidth B

A topology is ``Topology(nodes, bandwidth, **options)`` with ``capacity`` (per link),
``route(a, b)`` (the link ids from node a to node b, a != b, that share bandwidth) and ``hops(a, b)``:
how many links the message crosses, each paying the link latency (network.Cluster's ``link_latency``):

    crossbar, switch   2 (host -> switch -> host)
    fattree            2 within a leaf, 4 between leaves (host -> leaf -> spine -> leaf -> host)
    torus              one per hop (the hosts are the routers, as in SimGrid's TORUS cluster and Blue
                       Gene or TPU tori: a neighbour message crosses one link)
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

TOPOLOGIES = ("crossbar", "switch", "fattree", "torus2d", "torus3d")


class Topology:
    """Links of ``nodes`` nodes: ids 0..n-1 are the NICs' uplinks, n..2n-1 their downlinks."""

    name = "switch"

    def __init__(self, nodes: int, bandwidth: float):
        self.nodes, self.bandwidth = nodes, bandwidth
        self.capacity = np.full(2 * nodes, bandwidth)

    def route(self, a: int, b: int) -> tuple[int, ...]:
        return (a, self.nodes + b)

    def hops(self, a: int, b: int) -> int:
        """Links a message from node a to node b (a != b) crosses: each adds the link latency."""
        return 2

    def describe(self) -> str:
        return "one non-blocking switch (the NICs are shared)"


class Crossbar(Topology):
    name = "crossbar"

    def __init__(self, nodes: int, bandwidth: float):
        super().__init__(nodes, bandwidth)
        self.capacity = np.zeros(0)

    def route(self, a: int, b: int) -> tuple[int, ...]:
        return ()

    def describe(self) -> str:
        return "crossbar (no shared links)"


class FatTree(Topology):
    name = "fattree"

    def __init__(self, nodes: int, bandwidth: float, leaf_size: int = 16, oversubscription: float = 1.0):
        super().__init__(nodes, bandwidth)
        if leaf_size < 1 or oversubscription <= 0:
            raise ValueError(
                f"fattree: leaf_size must be >= 1 and oversubscription > 0, got {leaf_size}, {oversubscription}"
            )
        self.leaf_size, self.oversubscription = leaf_size, oversubscription
        leaves = -(-nodes // leaf_size)
        trunk = leaf_size * bandwidth / oversubscription  # a leaf's links to the spine, up and down
        self.capacity = np.concatenate([self.capacity, np.full(2 * leaves, trunk)])
        self.leaves = leaves

    def route(self, a: int, b: int) -> tuple[int, ...]:
        la, lb = a // self.leaf_size, b // self.leaf_size
        if la == lb:
            return (a, self.nodes + b)
        base = 2 * self.nodes
        return (a, base + la, base + self.leaves + lb, self.nodes + b)

    def hops(self, a: int, b: int) -> int:
        return 2 if a // self.leaf_size == b // self.leaf_size else 4

    def describe(self) -> str:
        return f"fat tree, leaves of {self.leaf_size} nodes, oversubscription {self.oversubscription:g}:1"


class Torus(Topology):
    def __init__(self, nodes: int, bandwidth: float, ndims: int = 2, dims: tuple[int, ...] | None = None):
        super().__init__(nodes, bandwidth)
        self.dims = tuple(dims) if dims is not None else balanced_dims(nodes, ndims)
        if math.prod(self.dims) != nodes:
            raise ValueError(f"torus: dims {self.dims} hold {math.prod(self.dims)} nodes, not {nodes}")
        self.name = f"torus{len(self.dims)}d"
        hops = 2 * nodes * len(self.dims)  # per node: one link each way in every dimension
        self.capacity = np.concatenate([self.capacity, np.full(hops, bandwidth)])
        self._route = functools.lru_cache(maxsize=1 << 16)(self._dimension_order)

    def coords(self, node: int) -> list[int]:
        return [int(i) for i in np.unravel_index(node, self.dims)]

    def _link(self, node: int, dim: int, up: bool) -> int:
        return 2 * self.nodes + (node * len(self.dims) + dim) * 2 + int(up)

    def _dimension_order(self, a: int, b: int) -> tuple[int, ...]:
        here, there = self.coords(a), self.coords(b)
        links = [a]
        for dim in reversed(range(len(self.dims))):  # the fastest-varying coordinate first, as SimGrid's TORUS
            size = self.dims[dim]
            forward = (there[dim] - here[dim]) % size
            up = _forward(here[dim], there[dim], size)
            for _ in range(forward if up else (size - forward) % size):
                node = int(np.ravel_multi_index(here, self.dims))
                links.append(self._link(node, dim, up))
                here[dim] = (here[dim] + (1 if up else -1)) % size
        links.append(self.nodes + b)
        return tuple(links)

    def route(self, a: int, b: int) -> tuple[int, ...]:
        return self._route(a, b)

    def hops(self, a: int, b: int) -> int:
        """The torus hops, the short way round in every dimension (the route less its two NIC links)."""
        return len(self._route(a, b)) - 2

    def describe(self) -> str:
        return f"{len(self.dims)}-D torus {'x'.join(map(str, self.dims))}, dimension-order routing"


def _forward(mine: int, target: int, size: int) -> bool:
    """Whether the short way round a ring of ``size`` from ``mine`` to ``target`` is forward (+1 a hop).

    On a tie (target half way round) forward, except from the middle coordinate to 0: SimGrid's
    TorusZone rule, so that the two simulators load the same links.
    """
    half = size // 2
    return target > mine and target <= mine + half or mine > half and (mine + half) % size >= target


def balanced_dims(nodes: int, ndims: int) -> tuple[int, ...]:
    """The factorisation of ``nodes`` into ``ndims`` factors closest to equal (largest first)."""
    best: tuple[int, ...] = (nodes,) + (1,) * (ndims - 1)
    divisors = [d for d in range(1, nodes + 1) if nodes % d == 0]
    for combo in itertools.combinations_with_replacement(divisors, ndims - 1):
        rest = nodes // math.prod(combo) if nodes % math.prod(combo) == 0 else 0
        if rest:
            dims = tuple(sorted((*combo, rest), reverse=True))
            if max(dims) - min(dims) < max(best) - min(best):
                best = dims
    return best


def make_topology(name: str, nodes: int, bandwidth: float, **options) -> Topology:
    """A topology by name (TOPOLOGIES); unknown names list the known ones."""
    if name == "crossbar":
        return Crossbar(nodes, bandwidth)
    if name == "switch":
        return Topology(nodes, bandwidth)
    if name == "fattree":
        return FatTree(nodes, bandwidth, **options)
    if name in ("torus2d", "torus3d"):
        return Torus(nodes, bandwidth, ndims=int(name[5]), **options)
    raise ValueError(f"unknown topology {name!r}: expected one of {', '.join(TOPOLOGIES)}")
