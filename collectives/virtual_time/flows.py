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
    used, link_of = np.unique(link_of, return_inverse=True)
    left = capacity[used].astype(float)  # capacity not yet given to frozen flows
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
        self.left = np.zeros(0)  # bytes not yet moved
        self.rate = np.zeros(0)  # bytes/s since the last sharing
        self.size = np.zeros(0)  # the message's bytes
        self.paths: list[Path] = []
        self.messages: list[tuple] = []
        self.arrays: list[np.ndarray] = []  # each flow's links, as an array
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
        """Remove the flows that have ended (their messages returned) and share the links among the others."""
        for send, recv, path in self.starting:
            if path.links not in self._links:
                self._links[path.links] = np.array(path.links, dtype=np.int64)
            self.arrays.append(self._links[path.links])
            self.paths.append(path)
            self.messages.append((send, recv))
        sizes = np.array([float(item[0].nbytes) for item in self.starting])
        self.left, self.size = np.concatenate([self.left, sizes]), np.concatenate([self.size, sizes])
        self.starting = []
        ended = self.left <= TOLERANCE * self.size
        done = [self.messages[i] for i in np.flatnonzero(ended)]
        if ended.any():
            keep = np.flatnonzero(~ended)
            self.left, self.size = self.left[keep], self.size[keep]
            self.paths = [self.paths[i] for i in keep]
            self.messages = [self.messages[i] for i in keep]
            self.arrays = [self.arrays[i] for i in keep]
        count = np.array([a.size for a in self.arrays], dtype=np.int64)
        flow_of = np.repeat(np.arange(count.size), count)
        link_of = np.concatenate(self.arrays) if self.arrays else np.zeros(0, dtype=np.int64)
        caps = np.array([p.rate for p in self.paths], dtype=float)
        self.rate = _progressive_filling(self.capacity, flow_of, link_of, caps, weights_of(self.fabric, self.paths))
        self.version += 1
        self.dirty = False
        moving = self.rate > 0
        self.next_end = self.now + (self.left[moving] / self.rate[moving]).min() if moving.any() else np.inf
        return done
