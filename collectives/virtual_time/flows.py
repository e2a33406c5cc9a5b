"""Messages in flight as flows that share links max-min fairly (the flow model of SimGrid and its kin).

Max-min fairness by progressive filling (Bertsekas & Gallager, "Data Networks", 1992): every
flow's rate grows at the same pace until a link is full (its capacity c split among its n
unfrozen flows: level c / n) or a flow reaches its own cap (its path's rate); those flows freeze
at that level, their share leaves the links' capacity, and the others go on growing. The result:
no flow can go faster without slowing one that is no faster than it. Rates are shared anew
whenever a flow starts or ends (``Flows.reshare``), and between two changes every flow moves at
its rate. A network with ``sharing="rtt"`` (network.Cluster) weighs each flow by 1 / its latency,
as SimGrid's CM02 model does (TCP's bias against long round trips); the default shares equally.

``filling_by_levels`` is that filling as the textbook states it, one level at a time. The engine runs
``_progressive_filling``: the same rates in a few rounds of NumPy calls, freezing every link that is the
lowest of all its flows' links at once. A re-share reaches only the flows a change can affect (those
connected to it through links that can limit a flow, ``binding``).
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


def filling_by_levels(
    capacity: np.ndarray, links: list[list[int]], caps: list[float], weights: list[float] | None = None
) -> list[float]:
    """max_min_rates as the textbook fills: one level at a time, in plain Python (the reference the engine's
    rounds, _progressive_filling, are tested against; with a few flows it is as fast: some 30 us).

    Every growing flow i takes weight_i x level. At each step the level rises to the lowest of each link's
    share (its capacity left over the weight of its growing flows) and each growing flow's cap / weight;
    the flows of that link, or at that cap, freeze there, and their rates leave their links' capacity.
    """
    n = len(links)
    w = [1.0] * n if weights is None else [float(x) for x in weights]
    rate, growing = [0.0] * n, set(range(n))
    left: dict[int, float] = {}  # each link's capacity not yet given to frozen flows
    while growing:
        weight: dict[int, float] = {}
        for i in growing:
            for link in links[i]:
                weight[link] = weight.get(link, 0.0) + w[i]
                left.setdefault(link, float(capacity[link]))
        share = {link: left[link] / total for link, total in weight.items()}
        level = min([*share.values(), *(caps[i] / w[i] for i in growing)])
        limit = level * (1 + 1e-12)
        frozen = [i for i in growing if caps[i] / w[i] <= limit or any(share[link] <= limit for link in links[i])]
        for i in frozen:
            rate[i] = min(level * w[i], caps[i])
            for link in links[i]:
                left[link] -= rate[i]
        growing.difference_update(frozen)
    return rate


def _progressive_filling(
    capacity: np.ndarray,
    flow_of: np.ndarray,
    link_of: np.ndarray,
    caps: np.ndarray,
    weights: np.ndarray | None,
    binds: np.ndarray | None = None,
) -> np.ndarray:
    """max_min_rates on the crossings: entry e is flow flow_of[e] on link link_of[e] (arrays of one length, each
    flow's crossings together in flow order); ``binds`` the links that can limit a flow, if known (``binding``).

    The filling freezes the flows of many links at once. A link's share (its capacity left over the weight
    of its growing flows) only grows as flows freeze, since a flow freezes at a rate no higher than the
    share of any link it crosses. So a link whose share is the lowest of every link its flows cross (and
    no higher than their caps) is where the filling would freeze them all, whatever happens elsewhere
    first: every such link, and every flow whose cap is below all its links' shares, freezes in one round
    (the global minimum is always one of them, so each round freezes a flow). On a torus 1 to 5 rounds
    where one level at a time took about 13. Only links that can limit a flow take part (``binding``).
    filling_by_levels is the textbook's filling; tests/test_flows_incremental.py holds the two to each other.
    """
    n = caps.size
    if n == 0:
        return np.zeros(0)
    rate = np.zeros(n)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
    if binds is None:
        binds = binding(capacity, flow_of, link_of, caps)
    limits = binds[link_of]  # the other links never limit a flow: leave them out
    flow_of, link_of = flow_of[limits], link_of[limits]
    used = np.zeros(capacity.size, dtype=bool)
    used[link_of] = True
    used_links = np.flatnonzero(used)
    m = used_links.size
    number = np.empty(capacity.size, dtype=np.int64)
    number[used_links] = np.arange(m)
    link_of = number[link_of]  # the links in use as 0..m-1
    left = capacity[used_links]  # capacity not yet given to frozen flows (a copy)
    cap_level = caps / w  # the level at which a flow reaches its own cap
    count = np.bincount(flow_of, minlength=n)  # each growing flow's crossings
    free = count == 0
    rate[free] = caps[free]  # no link limits it: its cap
    live = np.flatnonzero(~free)  # the flows still growing; flow_of and link_of hold only their crossings
    count = count[live]
    w_crossing = None if weights is None else w[flow_of]
    with np.errstate(divide="ignore", invalid="ignore"):  # links of frozen flows only: never read
        while live.size:
            share = (left / np.bincount(link_of, weights=w_crossing, minlength=m))[link_of]  # per crossing
            first = np.cumsum(count) - count  # each growing flow's first crossing
            own = cap_level[live]
            lowest = np.minimum(np.minimum.reduceat(share, first), own)  # each flow's least level
            limit = lowest * (1 + 1e-12)
            lowest_here = share <= np.repeat(limit, count)  # the crossing's link is its flow's lowest
            everyones = np.bincount(link_of[~lowest_here], minlength=m) == 0  # every flow's there
            freeze = np.logical_or.reduceat(everyones[link_of], first) | (own <= limit)
            if freeze.all():  # the last round
                rate[live] = np.minimum(lowest * w[live], caps[live])
                break
            done = live[freeze]
            rate[done] = np.minimum(lowest[freeze] * w[done], caps[done])
            crossing = np.repeat(freeze, count)
            left -= np.bincount(link_of[crossing], weights=rate[flow_of[crossing]], minlength=m)
            flow_of, link_of = flow_of[~crossing], link_of[~crossing]
            if w_crossing is not None:
                w_crossing = w_crossing[~crossing]
            live, count = live[~freeze], count[~freeze]
    return rate


def binding(capacity: np.ndarray, flow_of: np.ndarray, link_of: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """Which links can limit a flow (a (L,) mask): those whose flows' caps add up to more than their capacity.

    A link that can carry every flow crossing it at its cap never fills before they all reach their caps, so
    it never decides a rate: max-min fairness over the other links gives the same rates, and two flows that
    meet only on such links do not affect each other. Entry e of flow_of / link_of: flow flow_of[e] crosses
    link link_of[e]; caps (n,) per flow."""
    return caps_through(capacity, flow_of, link_of, caps) > capacity


def caps_through(capacity: np.ndarray, flow_of: np.ndarray, link_of: np.ndarray, caps: np.ndarray) -> np.ndarray:
    """(L,) the sum of the caps of the flows crossing each link."""
    return np.bincount(link_of, weights=caps[flow_of], minlength=capacity.size)


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
        # one column a flow, one row each: bytes left, the message's bytes, bytes/s since the last sharing, its
        # path's cap and latency (self.left ... self.latency: views of the rows); (send, recv) as an object
        self.state = np.zeros((5, 0))
        self._rows()
        self.messages = np.empty(0, dtype=object)
        # the crossings of the flows in flight: entry e is flow flow_of[e] on link link_of[e]
        self.flow_of, self.link_of = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        self.through = np.zeros(self.capacity.size)  # caps_through: the caps of each link's flows, kept up to date
        self.starting: list[tuple] = []  # (send, recv, path) added since the last sharing, at ``now``
        self.now = 0.0
        self.dirty = False  # flows started or ended since the last sharing
        self.version = 0  # the sharing the pending "next end" event belongs to
        self.next_end = np.inf
        self._links: dict[tuple[int, ...], np.ndarray] = {}  # a route's links as an array, made once

    def _rows(self) -> None:
        self.left, self.size, self.rate, self.cap, self.latency = self.state

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
        """Remove the flows that have ended (their messages returned) and share the links anew among the flows a
        change can reach: the flows that started, those on a link of a started or ended flow that can limit a
        flow (``binding``: with them or without them), and those connected to these through such links, and so
        on. The others keep their rates: max-min fairness shares each set of flows connected through binding
        links on its own (on a torus, a change reaches a few percent of the flows in flight, often none)."""
        start, self.starting = self.starting, []
        changed = [self._array(path.links) for _, _, path in start]  # links whose flows changed
        first = self.left.size  # the started flows are first.. on
        if start:
            sizes = np.array([float(send.nbytes) for send, _, _ in start])
            count = np.array([a.size for a in changed], dtype=np.int64)
            new_flows, new_links = np.repeat(np.arange(count.size), count), np.concatenate(changed)
            self.flow_of = np.concatenate([self.flow_of, new_flows + first])
            self.link_of = np.concatenate([self.link_of, new_links])
            caps = np.array([path.rate for _, _, path in start], dtype=float)
            latency = np.array([path.latency for _, _, path in start], dtype=float)
            self.state = np.concatenate([self.state, [sizes, sizes, np.zeros(len(start)), caps, latency]], axis=1)
            self._rows()
            self.messages = np.concatenate([self.messages, _objects([(send, recv) for send, recv, _ in start])])
            self.through += caps_through(self.capacity, new_flows, new_links, caps)
        ended = self.left <= TOLERANCE * self.size
        done = list(self.messages[ended]) if ended.any() else []
        if start or done:
            self._share_changed(start, done, ended, changed, first)
        self.version += 1
        self.dirty = False
        moving = self.rate > 0
        self.next_end = self.now + (self.left[moving] / self.rate[moving]).min() if moving.any() else np.inf
        return done

    def _share_changed(self, start: list, done: list, ended: np.ndarray, changed: list, first: int) -> None:
        """reshare's sharing: remove the ended flows, then share the links among those the change reaches."""
        # links that can limit a flow with the started and the ended flows all counted: a link of a changed flow
        # that is binding neither before nor after the change limited none of its flows, nor will
        through = self.through
        either = through > self.capacity
        started = np.arange(first, self.left.size)
        if done:
            gone = ended[self.flow_of]
            changed.append(self.link_of[gone])
            through -= caps_through(self.capacity, self.flow_of[gone], self.link_of[gone], self.cap)
            renumber = np.cumsum(~ended) - 1
            self.link_of, self.flow_of = self.link_of[~gone], renumber[self.flow_of[~gone]]
            started = renumber[started[~ended[first:]]]
            self.state, self.messages = self.state[:, ~ended], self.messages[~ended]
            self._rows()
            if not self.flow_of.size:  # none in flight: start again from exact zeros (no rounding left over)
                through[:] = 0.0
        seeds = np.concatenate(changed)
        seeds = seeds[either[seeds]]
        if self.left.size and (seeds.size or started.size):
            flow_of, link_of = self.flow_of, self.link_of
            binds = through > self.capacity  # binding() now that the ended flows are gone
            touched = _connected(self.left.size, binds, flow_of, link_of, seeds, started)
            if touched.all():  # (often, on a torus: _connected gave up) every flow as it is
                latency, caps = self.latency, self.cap
            elif touched.any():
                entries = touched[flow_of]
                flow_of, link_of = (np.cumsum(touched) - 1)[flow_of[entries]], link_of[entries]  # as 0..m-1
                latency, caps = self.latency[touched], self.cap[touched]
            else:
                return
            weights = 1.0 / latency if self.rtt and (latency > 0).all() else None  # weights_of
            self.rate[touched] = _progressive_filling(self.capacity, flow_of, link_of, caps, weights, binds)

    def _array(self, links: tuple[int, ...]) -> np.ndarray:
        """A route's links as an array, made once."""
        if links not in self._links:
            self._links[links] = np.array(links, dtype=np.int64)
        return self._links[links]


def _connected(
    n: int, binds: np.ndarray, flow_of: np.ndarray, link_of: np.ndarray, seeds: np.ndarray, flows: np.ndarray
) -> np.ndarray:
    """Which of n flows are ``flows``, cross one of the links ``seeds``, or are connected to these through flows
    and the links they cross that can limit a flow (``binds``, a mask of the links: ``binding``): an (n,) mask.
    Entry e of flow_of / link_of: flow flow_of[e] crosses link link_of[e]."""
    touched = np.zeros(n, dtype=bool)
    touched[flows] = True
    marked = np.zeros(binds.size, dtype=bool)
    marked[seeds] = True
    touched[flow_of[marked[link_of]]] = True
    on_binding = binds[link_of]  # from here on only through binding links: the crossings of those alone
    flow_of, link_of = flow_of[on_binding], link_of[on_binding]
    reached = np.count_nonzero(touched)
    for _ in range(SWEEPS):  # a few sweeps over every crossing: enough for most changes (a few flows)
        marked[link_of[touched[flow_of]]] = True
        touched[flow_of[marked[link_of]]] = True
        before, reached = reached, np.count_nonzero(touched)
        if reached == before:
            return touched
    # not settled after a few sweeps: a large set (on a torus a dozen sweeps would settle it). Share them all
    # anew: the union of connected sets is shared as each set would be on its own, and the filling reads
    # every crossing a few times where the sweeps would read them a dozen
    return np.ones(n, dtype=bool)


SWEEPS = 3  # sweeps over the crossings before _connected gives up finding the set and takes every flow


def _objects(items: list) -> np.ndarray:
    """``items`` as a 1-D object array (NumPy would make a list of tuples or equal arrays a 2-D one)."""
    out = np.empty(len(items), dtype=object)
    for i, item in enumerate(items):
        out[i] = item
    return out
