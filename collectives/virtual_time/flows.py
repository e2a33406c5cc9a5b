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

from typing import Any

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
    rate = np.zeros(n)
    if n == 0:
        return rate
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    flow_of = np.repeat(np.arange(n), [len(ls) for ls in links])  # one entry per (flow, link) crossing
    link_of = np.fromiter((link for ls in links for link in ls), dtype=np.int64, count=flow_of.size)
    left = np.array(capacity, dtype=float)  # capacity not yet given to frozen flows
    frozen = np.zeros(n, dtype=bool)
    while not frozen.all():
        live = ~frozen[flow_of]
        weight = np.bincount(link_of[live], weights=w[flow_of[live]], minlength=left.size)
        with np.errstate(divide="ignore", invalid="ignore"):
            share = np.where(weight > 0, left / np.where(weight > 0, weight, 1), np.inf)
        level = min(share.min(initial=np.inf), (caps[~frozen] / w[~frozen]).min())
        limit = level * (1 + 1e-12)
        hit = ~frozen & (caps <= limit * w)
        full = live & (share[link_of] <= limit)
        hit[flow_of[full]] = True
        hit &= ~frozen
        rate[hit] = np.minimum(level * w[hit], caps[hit])
        crossing = hit[flow_of]
        np.subtract.at(left, link_of[crossing], rate[flow_of[crossing]])
        frozen |= hit
    return rate


def weights_of(fabric: Fabric, paths: list[Path]) -> np.ndarray | None:
    """Each flow's weight in the sharing: None (equal) unless the fabric shares by RTT (1 / path latency)."""
    if not getattr(fabric, "rtt_sharing", False):
        return None
    latency = np.array([path.latency for path in paths])
    return None if (latency <= 0).any() else 1.0 / latency


class Flows:
    """The flows in flight on a fabric: their bytes left and rates, from the last time they were shared."""

    def __init__(self, fabric: Fabric):
        self.capacity, self.fabric = fabric.capacity, fabric
        self.active: dict[int, list[Any]] = {}  # id -> [bytes left, rate, size, path, message]
        self.now = 0.0
        self.dirty = False  # flows started or ended since the last sharing
        self.version = 0  # the sharing the pending "next end" event belongs to
        self.next_end = np.inf
        self._ids = 0

    def progress(self, now: float) -> None:
        """Move every flow on at its rate up to ``now``."""
        dt = now - self.now
        if dt > 0:
            for flow in self.active.values():
                flow[0] -= flow[1] * dt
        self.now = max(self.now, now)

    def add(self, now: float, item: tuple) -> None:
        """A message's bytes start flowing (its latency has passed)."""
        send, recv, path = item
        self.progress(now)
        self._ids += 1
        self.active[self._ids] = [float(send.nbytes), 0.0, float(send.nbytes), path, (send, recv)]
        self.dirty = True

    def advance(self, now: float) -> None:
        """The time at which the first flow was to end, under the current sharing."""
        self.progress(now)
        self.dirty = True

    def reshare(self) -> list[tuple]:
        """Remove the flows that have ended (their messages returned) and share the links among the others."""
        ended = [fid for fid, f in self.active.items() if f[0] <= TOLERANCE * f[2]]
        messages = [self.active.pop(fid)[4] for fid in ended]
        flows = list(self.active.values())
        paths: list[Path] = [f[3] for f in flows]
        caps = np.array([p.rate for p in paths])
        rates = max_min_rates(self.capacity, [p.links for p in paths], caps, weights_of(self.fabric, paths))
        for flow, rate in zip(flows, rates):
            flow[1] = rate
        self.version += 1
        self.dirty = False
        ends = [f[0] / f[1] for f in flows if f[1] > 0]
        self.next_end = self.now + min(ends) if ends else np.inf
        return messages
