"""Topologies: which links a message between two nodes crosses, and what each link carries (bytes/s).

Links are one-way (full duplex: a node's uplink and downlink are two links). Every node has a NIC:
an uplink (its injection) and a downlink (its ejection), of the link's bandwidth B.

    crossbar   no shared links at all (every pair of nodes has its own wire)
    switch     one non-blocking switch: a message crosses the sender's uplink and the receiver's
               downlink, so only the NICs are shared (a root receiving from everyone shares its downlink)
    fattree    leaves of ``leaf_size`` nodes with leaf_size / ``oversubscription`` uplinks (1: full
               bisection; 4: a quarter of it); with ``pod_size``, three levels (pods of that many leaves,
               spines ``spine_oversubscription``:1 to the cores). ``routing="trunk"`` (the default): a
               leaf's uplinks are one trunk of leaf_size B / oversubscription each way; ``"static"``:
               links of their own, a flow on uplink (destination mod uplinks), as InfiniBand's D-mod-K
    dragonfly  routers of ``router_size`` nodes in groups of ``group_size`` routers joined all-to-all, one
               global link between every two groups (SimGrid's DRAGONFLY, one chassis a group), minimal routing
    torus      nodes on a torus of sides ``dims`` (any number); torus2d and torus3d: 2-D and 3-D, dims
               as near equal as the node count allows unless given; dimension-order routing the short way
               round (on a tie as SimGrid), the last (fastest-varying) coordinate first as in SimGrid's
               TORUS, each hop a link of bandwidth B

A topology is ``Topology(nodes, bandwidth, **options)`` with ``capacity`` (per link),
``route(a, b)`` (the link ids from node a to node b, a != b, that share bandwidth) and ``hops(a, b)``:
how many links the message crosses, each paying the link latency (network.Cluster's ``link_latency``):

    crossbar, switch   2 (host -> switch -> host)
    fattree            2 within a leaf, 4 between leaves (host -> leaf -> spine -> leaf -> host),
                       6 between pods (through a core)
    dragonfly          2 within a router, up to 5 between groups (a local link, the global one, a local one)
    torus              one per hop (the hosts are the routers, as in SimGrid's TORUS cluster and Blue
                       Gene or TPU tori: a neighbour message crosses one link)
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np

TOPOLOGIES = ("crossbar", "switch", "fattree", "dragonfly", "torus", "torus2d", "torus3d")
ROUTINGS = ("trunk", "static")  # a fat tree's: FatTree


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


class CrossbarTopology(Topology):
    name = "crossbar"

    def __init__(self, nodes: int, bandwidth: float):
        super().__init__(nodes, bandwidth)
        self.capacity = np.zeros(0)

    def route(self, a: int, b: int) -> tuple[int, ...]:
        return ()

    def describe(self) -> str:
        return "crossbar (no shared links)"


class FatTree(Topology):
    """A fat tree of ``leaf_size``-node leaves (two levels), or of pods of ``pod_size`` leaves (three levels).

    Each leaf has ``leaf_size / oversubscription`` uplinks (U1); a spine has one link to each leaf below it
    (two levels: U1 spines, each joined to every leaf; three levels: U1 spines per pod, each with
    ``pod_size / spine_oversubscription`` uplinks (U2) to the U1 x U2 cores, each core joined to one spine of
    every pod). Every link carries the link's bandwidth B. This is the extended generalized fat tree
    XGFT(h; m; w) of Ohring et al., "On generalized fat trees" (1995), with m = (leaf_size, leaves) or
    (leaf_size, pod_size, pods) children and w = (1, U1) or (1, U1, U2) parents per level, as SimGrid's
    FAT_TREE cluster builds it ("2;m1,m2;w1,w2;1,1").

    ``routing`` says how a message goes up:

        "trunk"   each switch's uplinks act as one link of their summed bandwidth (a leaf's trunk of
                  leaf_size B / oversubscription), and so do the downlinks below a spine: flows share a
                  trunk max-min fairly, as if the switches spread every flow over all their uplinks
        "static"  destination-mod-k (Zahavi, "D-Mod-K routing providing non-blocking traffic for shift
                  permutations on real life fat trees", 2010), as InfiniBand's ftree routing and SimGrid's
                  FAT_TREE do: a flow to node d climbs from level l on uplink (d // (w_1 ... w_l)) mod
                  w_(l+1); the way down is then unique. Flows whose destinations agree mod U1 pile onto one
                  uplink while the others idle.

    The two agree when every leaf's flows spread evenly over the uplinks' residues (shifts, powers of two);
    they differ when they do not (recursive doubling's fold at p = 12 leaves the odd ranks of the first
    leaves sending to odd destinations: one uplink of two carries them all).
    """

    name = "fattree"

    def __init__(
        self,
        nodes: int,
        bandwidth: float,
        leaf_size: int = 16,
        oversubscription: float = 1.0,
        routing: str = "trunk",
        pod_size: int | None = None,
        spine_oversubscription: float = 1.0,
    ):
        super().__init__(nodes, bandwidth)
        if leaf_size < 1 or oversubscription <= 0 or spine_oversubscription <= 0:
            raise ValueError(
                f"fattree: leaf_size must be >= 1 and oversubscription > 0, got {leaf_size}, {oversubscription}"
            )
        if routing not in ROUTINGS:
            raise ValueError(f"fattree: unknown routing {routing!r}: expected one of {', '.join(ROUTINGS)}")
        if pod_size is not None and pod_size < 1:
            raise ValueError(f"fattree: pod_size must be >= 1 leaves, got {pod_size}")
        self.leaf_size, self.oversubscription, self.routing = leaf_size, oversubscription, routing
        self.pod_size, self.spine_oversubscription = pod_size, spine_oversubscription
        self.leaves = -(-nodes // leaf_size)
        static = routing == "static"
        uplinks = [_uplinks("leaf", leaf_size, oversubscription, static)]
        down = [leaf_size, self.leaves]
        if pod_size is not None:
            uplinks.append(_uplinks("spine", pod_size, spine_oversubscription, static))
            down = [leaf_size, pod_size, -(-self.leaves // pod_size)]
        self.down, self.up = tuple(down), (1, *uplinks)  # XGFT's m and w, level 0 (the nodes' NICs) first
        self.levels = len(self.down)
        # below[l]: nodes under a level-l switch; replicas[l]: level-l switches over the same nodes (w_1 ... w_l),
        # 1 under "trunk" (one switch whose uplinks are one link of their summed bandwidth)
        self.below = [math.prod(self.down[:l]) for l in range(self.levels + 1)]
        self.replicas = [int(math.prod(self.up[:l])) if static else 1 for l in range(self.levels + 1)]
        self._base, total = [0], 2 * nodes  # level 0's links are the NICs (ids 0..2n-1)
        for level in range(1, self.levels):  # one link up and one down per (level-l switch, uplink)
            self._base.append(total)
            capacity = bandwidth if static else bandwidth * math.prod(self.up[: level + 1])
            self.capacity = np.concatenate([self.capacity, np.full(2 * self._count(level), capacity)])
            total += 2 * self._count(level)
        self._route = functools.lru_cache(maxsize=1 << 16)(self._d_mod_k)

    def _ports(self, level: int) -> int:
        """Uplinks of a level-``level`` switch that are links of their own (one, summed, under "trunk")."""
        return int(self.up[level]) if self.routing == "static" else 1

    def _count(self, level: int) -> int:
        """Uplinks of all level-``level`` switches: subtrees x replicas x ports."""
        return self.below[-1] // self.below[level] * self.replicas[level] * self._ports(level)

    def _link(self, level: int, subtree: int, replica: int, port: int, down: bool) -> int:
        """The link between level-``level`` switch (``subtree``, ``replica``) and its parent on ``port``."""
        index = (subtree * self.replicas[level] + replica) * self._ports(level) + port
        return self._base[level] + self._count(level) * int(down) + index

    def _top(self, a: int, b: int) -> int:
        """The lowest level whose switches are above both nodes (1: the same leaf)."""
        return next(level for level in range(1, self.levels + 1) if a // self.below[level] == b // self.below[level])

    def _d_mod_k(self, a: int, b: int) -> tuple[int, ...]:
        up, down, replica = [a], [self.nodes + b], 0
        for level in range(1, self._top(a, b)):  # from a level-`level` switch up to its parent, and down to b's
            port = (b // self.replicas[level]) % self._ports(level)
            up.append(self._link(level, a // self.below[level], replica, port, down=False))
            down.append(self._link(level, b // self.below[level], replica, port, down=True))
            replica += self.replicas[level] * port
        return (*up, *reversed(down))

    def route(self, a: int, b: int) -> tuple[int, ...]:
        return self._route(a, b)

    def hops(self, a: int, b: int) -> int:
        """2 within a leaf, 4 within a pod (or a two-level tree), 6 through a core."""
        return 2 * self._top(a, b)

    def describe(self) -> str:
        pods = f", pods of {self.pod_size} leaves, spines {self.spine_oversubscription:g}:1" if self.pod_size else ""
        return (
            f"fat tree, leaves of {self.leaf_size} nodes, oversubscription {self.oversubscription:g}:1{pods}, "
            f"{self.routing} routing"
        )


def _uplinks(switch: str, down: int, oversubscription: float, whole: bool) -> float:
    """A switch's uplinks: its ``down`` links / ``oversubscription`` (``whole``: as links of their own, a whole number)."""
    up = down / oversubscription
    if whole and (abs(up - round(up)) > 1e-9 or round(up) < 1):
        raise ValueError(
            f"fattree: a {switch} of {down} downlinks at {oversubscription:g}:1 has {up:g} uplinks; static routing "
            "needs a whole number >= 1 of them"
        )
    return float(round(up)) if whole else up


class Dragonfly(Topology):
    """A dragonfly (Kim et al., "Technology-driven, highly-scalable dragonfly topology", 2008): routers of
    ``router_size`` nodes in groups of ``group_size`` routers joined all-to-all by local links, and one global
    link between every two groups; each of those links carries ``local_links`` (``global_links``) x B each way.

    As SimGrid's DRAGONFLY cluster with one chassis a group ("G,global_links;1,1;group_size,local_links;
    router_size"), the link from group i to group j leaves from router j of group i (so there are at most
    group_size groups) and arrives at router i of group j, and the routing is minimal: a local link to the
    router that holds the global link (unless the message is there), the global link, a local link to the
    destination's router (unless it arrived there). Within a router 2 links (the NICs), across groups up to 5.
    """

    name = "dragonfly"

    def __init__(self, nodes: int, bandwidth: float, router_size: int = 4, group_size: int = 4,
                 local_links: int = 1, global_links: int = 1):  # fmt: skip
        if min(router_size, group_size, local_links, global_links) < 1:
            raise ValueError(
                f"dragonfly: router_size, group_size, local_links and global_links must be >= 1, got "
                f"{router_size}, {group_size}, {local_links}, {global_links}"
            )
        self.router_size, self.group_size = router_size, group_size
        self.groups = -(-nodes // (router_size * group_size))
        if self.groups > group_size:
            raise ValueError(
                f"dragonfly: {nodes} nodes make {self.groups} groups of {group_size} routers of {router_size}, but "
                f"a group's routers hold one global link to each other group: at most {group_size} groups"
            )
        super().__init__(nodes, bandwidth)  # checked first: a refused size allocates nothing
        self.local_base = 2 * nodes  # (group, from router, to router), a group_size^2 block per group
        self.global_base = self.local_base + self.groups * group_size**2  # (from group, to group)
        self.capacity = np.concatenate(
            [self.capacity, np.full(self.groups * group_size**2, local_links * bandwidth),
             np.full(self.groups**2, global_links * bandwidth)]
        )  # fmt: skip

    def _local(self, group: int, a: int, b: int) -> int:
        return self.local_base + (group * self.group_size + a) * self.group_size + b

    def route(self, a: int, b: int) -> tuple[int, ...]:
        group, router = divmod(a // self.router_size, self.group_size)
        to_group, to_router = divmod(b // self.router_size, self.group_size)
        links = [a]
        if to_group != group:
            if router != to_group:  # to the router that holds the global link to the destination's group
                links.append(self._local(group, router, to_group))
            links.append(self.global_base + group * self.groups + to_group)
            router = group  # it arrives at router <my group> of the destination's group
        if router != to_router:
            links.append(self._local(to_group, router, to_router))
        return (*links, self.nodes + b)

    def hops(self, a: int, b: int) -> int:
        return len(self.route(a, b))

    def describe(self) -> str:
        return (
            f"dragonfly, {self.groups} groups of {self.group_size} routers of {self.router_size} nodes, minimal routing"
        )


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
        """The node's coordinates, the last dimension varying fastest (NumPy's C order)."""
        out = []
        for size in reversed(self.dims):
            node, i = divmod(node, size)
            out.append(i)
        return out[::-1]

    def _link(self, node: int, dim: int, up: bool) -> int:
        return 2 * self.nodes + (node * len(self.dims) + dim) * 2 + int(up)

    def _dimension_order(self, a: int, b: int) -> tuple[int, ...]:
        here, there = self.coords(a), self.coords(b)
        links, node, stride = [a], a, 1  # node: here's number; stride: a step of one in dim changes it by this
        for dim in reversed(range(len(self.dims))):  # the fastest-varying coordinate first, as SimGrid's TORUS
            size = self.dims[dim]
            forward = (there[dim] - here[dim]) % size
            up = _forward(here[dim], there[dim], size)
            for _ in range(forward if up else (size - forward) % size):
                links.append(self._link(node, dim, up))
                step = (here[dim] + (1 if up else -1)) % size - here[dim]
                here[dim] += step
                node += step * stride
            stride *= size
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


OPTIONS = {  # what each topology takes (network.Cluster's options)
    "crossbar": (),
    "switch": (),
    "fattree": ("leaf_size", "oversubscription", "routing", "pod_size", "spine_oversubscription"),
    "dragonfly": ("router_size", "group_size", "local_links", "global_links"),
    "torus": ("dims",),
    "torus2d": ("dims",),
    "torus3d": ("dims",),
}


def check_options(name: str, options: dict) -> None:
    """One-line ValueError for an unknown topology, an option it does not take, or a torus name its dims contradict."""
    if name not in TOPOLOGIES:
        raise ValueError(f"unknown topology {name!r}: expected one of {', '.join(TOPOLOGIES)}")
    extra = sorted(set(options) - set(OPTIONS[name]))
    if extra:
        takes = f"its options: {', '.join(OPTIONS[name])}" if OPTIONS[name] else "it takes none"
        raise ValueError(f"topology {name!r} takes no option {extra[0]!r} ({takes})")
    dims = options.get("dims")
    if name == "torus" and dims is None:
        raise ValueError(
            "topology 'torus' needs dims (its sides, e.g. dims=(4, 4, 4)); torus2d and torus3d choose them"
        )
    if name in ("torus2d", "torus3d") and dims is not None and len(tuple(dims)) != int(name[5]):
        raise ValueError(
            f"topology {name!r} is {name[5]}-D but dims {tuple(dims)} has {len(tuple(dims))}: "
            "name it 'torus' (any number of dims)"
        )


def make_topology(name: str, nodes: int, bandwidth: float, **options) -> Topology:
    """A topology by name (TOPOLOGIES) and its options (OPTIONS); anything else is a one-line ValueError."""
    check_options(name, options)
    if name == "crossbar":
        return CrossbarTopology(nodes, bandwidth)
    if name == "switch":
        return Topology(nodes, bandwidth)
    if name == "fattree":
        return FatTree(nodes, bandwidth, **options)
    if name == "dragonfly":
        return Dragonfly(nodes, bandwidth, **options)
    return Torus(nodes, bandwidth, ndims=int(name[5]) if name != "torus" else 0, **options)
