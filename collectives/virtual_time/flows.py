"""Messages in flight as flows that share links max-min fairly (the flow model of SimGrid and its kin).

Max-min fairness by progressive filling (Bertsekas & Gallager, "Data Networks", 1992): every
flow's rate grows at the same pace until a link is full (its capacity c split among its n
unfrozen flows: level c / n) or a flow reaches its own cap (its path's rate); those flows freeze
at that level, their share leaves the links' capacity, and the others go on growing. The result:
no flow can go faster without slowing one that is no faster than it. Rates are shared anew
whenever a flow starts or ends (``Flows.reshare``), and between two changes every flow moves at
its rate. A network with ``sharing="rtt"`` (network.Cluster) weighs each flow by 1 / its latency,
as SimGrid's CM02 model does (TCP's bias against long round trips); the default shares equally.
"""

from __future__ import annotations

import numpy as np

from collectives.virtual_time.network import Fabric, Path

TOLERANCE = 1e-9  # relative: a flow with less than this part of its bytes left has ended


def max_min_rates(
    capacity: np.ndarray, links: list[tuple[int, ...]], caps: np.ndarray, weights: np.ndarray | None = None
) -> np.ndarray:
    """The max-min fair rate (bytes/s) of each flow: flow i crosses ``links[i]`` and may take at most ``caps[i]``.

    capacity: (L,) bytes/s per link. Returns (n,). A flow that crosses no link gets its cap. With
    ``weights`` (n,), the weighted max-min: the flows grow at rates weight_i x level, so that flows
    sharing one bottleneck get shares in proportion to their weights (SimGrid's CM02: 1 / latency).
    """
    n = len(links)
    flow_of = np.repeat(np.arange(n), [len(ls) for ls in links])  # one entry per (flow, link) crossing
    link_of = np.fromiter((link for ls in links for link in ls), dtype=np.int64, count=flow_of.size)
    return _progressive_filling(
        np.asarray(capacity, dtype=float), flow_of, link_of, np.asarray(caps, dtype=float), weights
    )


def _progressive_filling(
    capacity: np.ndarray, flow_of: np.ndarray, link_of: np.ndarray, caps: np.ndarray, weights: np.ndarray | None
) -> np.ndarray:
    """max_min_rates on the crossings: entry e is flow flow_of[e] on link link_of[e] (arrays of one length).

    Only the links some flow crosses take part (renumbered 0..L'-1), and the crossings of frozen flows leave
    the arrays as the flows freeze, so that each level costs what is still growing.
    """
    n = caps.size
    rate = np.zeros(n)
    if n == 0:
        return rate
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    used = np.zeros(capacity.size, dtype=bool)
    used[link_of] = True
    link_of = (np.cumsum(used) - 1)[link_of]
    left = capacity[used]  # capacity not yet given to frozen flows (a copy)
    live = np.arange(n)  # the flows still growing; flow_of and link_of hold only their crossings
    cap_level = caps / w  # the level at which a flow reaches its own cap
    hit = np.zeros(n, dtype=bool)
    while live.size:
        weight = np.bincount(link_of, weights=w[flow_of], minlength=left.size)
        share = np.divide(left, weight, out=np.full(left.size, np.inf), where=weight > 0)
        level = min(share.min(initial=np.inf), cap_level[live].min())
        limit = level * (1 + 1e-12)
        hit[live[cap_level[live] <= limit]] = True
        hit[flow_of[share[link_of] <= limit]] = True
        done = live[hit[live]]
        rate[done] = np.minimum(level * w[done], caps[done])
        crossing = hit[flow_of]
        left -= np.bincount(link_of[crossing], weights=rate[flow_of[crossing]], minlength=left.size)
        flow_of, link_of, live = flow_of[~crossing], link_of[~crossing], live[~hit[live]]
    return rate


def weights_of(fabric: Fabric, paths: list[Path]) -> np.ndarray | None:
    """Each flow's weight in the sharing: None (equal) unless the fabric shares by RTT (1 / path latency)."""
    if not getattr(fabric, "rtt_sharing", False):
        return None
    latency = np.array([path.latency for path in paths])
    return None if (latency <= 0).any() else 1.0 / latency


class Flows:
    """The flows in flight on a fabric: their bytes left and rates (NumPy arrays, one entry a flow, in the order
    they started), from the last time they were shared; flows that start join at the next ``reshare``."""

    def __init__(self, fabric: Fabric):
        self.capacity, self.fabric = fabric.capacity, fabric
        self.rtt = bool(getattr(fabric, "rtt_sharing", False))  # weights_of: 1 / latency
        # one entry a flow: bytes left, the message's bytes, bytes/s since the last sharing, its path's cap and
        # latency, (send, recv) as an object
        self.left, self.size, self.rate, self.cap, self.latency = (np.zeros(0) for _ in range(5))
        self.messages = np.empty(0, dtype=object)
        # the crossings of the flows in flight: entry e is flow flow_of[e] on link link_of[e]
        self.flow_of, self.link_of = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        self.starting: list[tuple] = []  # (send, recv, path) added since the last sharing, at ``now``
        self.now = 0.0
        self.dirty = False  # flows started or ended since the last sharing
        self.version = 0  # the sharing the pending "next end" event belongs to
        self.next_end = np.inf
        self._links: dict[tuple[int, ...], np.ndarray] = {}  # a route's links as an array, made once

    @property
    def active(self) -> int:
        """Flows in flight (those that started since the last sharing included)."""
        return self.left.size + len(self.starting)

    def progress(self, now: float) -> None:
        """Move every flow on at its rate up to ``now``."""
        dt = now - self.now
        if dt > 0:
            self.left -= self.rate * dt
        self.now = max(self.now, now)

    def add(self, now: float, item: tuple) -> None:
        """A message's bytes start flowing (its latency has passed)."""
        self.progress(now)
        self.starting.append(item)
        self.dirty = True

    def advance(self, now: float) -> None:
        """The time at which the first flow was to end, under the current sharing."""
        self.progress(now)
        self.dirty = True

    def reshare(self) -> list[tuple]:
        """Remove the flows that have ended (their messages returned) and share the links anew among the flows
        connected to a change: those that share a link with a flow that started or ended, and those that share
        one with them, and so on. The others keep their rates: max-min fairness shares each connected set of
        flows and links on its own (on a torus, a change reaches a few percent of the flows in flight)."""
        start, self.starting = self.starting, []
        seeds = [self._array(path.links) for _, _, path in start]  # links whose flows changed
        if start:
            sizes = np.array([float(send.nbytes) for send, _, _ in start])
            count = np.array([a.size for a in seeds], dtype=np.int64)
            self.flow_of = np.concatenate([self.flow_of, np.repeat(np.arange(count.size) + self.left.size, count)])
            self.link_of = np.concatenate([self.link_of, *seeds])
            appended = {
                "left": sizes, "size": sizes, "rate": np.zeros(len(start)),
                "cap": np.array([path.rate for _, _, path in start], dtype=float),
                "latency": np.array([path.latency for _, _, path in start], dtype=float),
                "messages": _objects([(send, recv) for send, recv, _ in start]),
            }  # fmt: skip
            for name, values in appended.items():
                setattr(self, name, np.concatenate([getattr(self, name), values]))
        ended = self.left <= TOLERANCE * self.size
        done = list(self.messages[ended]) if ended.any() else []
        if done:
            gone = ended[self.flow_of]
            seeds.append(self.link_of[gone])
            self.link_of, self.flow_of = self.link_of[~gone], (np.cumsum(~ended) - 1)[self.flow_of[~gone]]
            for name in ("left", "size", "rate", "cap", "latency", "messages"):
                setattr(self, name, getattr(self, name)[~ended])
        if self.left.size and seeds:
            flow_of, link_of = self.flow_of, self.link_of
            touched = _connected(self.left.size, self.capacity.size, flow_of, link_of, np.concatenate(seeds))
            entries = touched[flow_of]
            renumber = np.cumsum(touched) - 1  # the touched flows as 0..m-1 for the filling
            latency = self.latency[touched]
            weights = 1.0 / latency if self.rtt and (latency > 0).all() else None  # weights_of
            self.rate[touched] = _progressive_filling(
                self.capacity, renumber[flow_of[entries]], link_of[entries], self.cap[touched], weights
            )
        self.version += 1
        self.dirty = False
        moving = self.rate > 0
        self.next_end = self.now + (self.left[moving] / self.rate[moving]).min() if moving.any() else np.inf
        return done

    def _array(self, links: tuple[int, ...]) -> np.ndarray:
        """A route's links as an array, made once."""
        if links not in self._links:
            self._links[links] = np.array(links, dtype=np.int64)
        return self._links[links]


def _connected(flows: int, links: int, flow_of: np.ndarray, link_of: np.ndarray, seeds: np.ndarray) -> np.ndarray:
    """Which of ``flows`` flows are connected to the links ``seeds`` through flows and the links they cross (a
    (flows,) mask); entry e of flow_of / link_of: flow flow_of[e] crosses link link_of[e] of ``links``."""
    marked = np.zeros(links, dtype=bool)
    marked[seeds] = True
    touched = np.zeros(flows, dtype=bool)
    while True:
        reached = np.zeros(flows, dtype=bool)
        reached[flow_of[marked[link_of]]] = True
        if (reached == touched).all():
            return touched
        touched = reached
        marked[link_of[touched[flow_of]]] = True


def _objects(items: list) -> np.ndarray:
    """``items`` as a 1-D object array (NumPy would make a list of tuples or equal arrays a 2-D one)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out
