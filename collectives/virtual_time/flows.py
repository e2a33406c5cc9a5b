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
it for a change that reaches a few flows, and for more ``_progressive_filling``: the same rates in a few
rounds of NumPy calls, freezing every link that is the lowest of all its flows' links at once. A re-share
reaches only the flows a change can affect (``Flows._share``): those connected to it through links that
can limit a flow (``binding``), and of these only those at or above the change's own level.
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
    capacity, caps = np.asarray(capacity, dtype=float), np.asarray(caps, dtype=float)
    limits = binding(capacity, flow_of, link_of, caps)[link_of]  # the other links never limit a flow: left out
    return _progressive_filling(capacity, flow_of[limits], link_of[limits], caps, weights)


def filling_by_levels(
    capacity: np.ndarray | dict[int, float],
    links: list[list[int]],
    caps: list[float],
    weights: list[float] | None = None,
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
        limit = level + abs(level) * 1e-12  # (a level below 0: only from rounding)
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
) -> np.ndarray:
    """max_min_rates on the crossings: entry e is flow flow_of[e] on link link_of[e] (arrays of one length, each
    flow's crossings together in flow order), of the links that can limit a flow only (``binding``: the callers
    leave the others out).

    The filling freezes the flows of many links at once. A link's share (its capacity left over the weight
    of its growing flows) only grows as flows freeze, since a flow freezes at a rate no higher than the
    share of any link it crosses. So a link whose share is the lowest of every link its flows cross (and
    no higher than their caps) is where the filling would freeze them all, whatever happens elsewhere
    first: every such link, and every flow whose cap is below all its links' shares, freezes in one round
    (the global minimum is always one of them, so each round freezes a flow). On a torus 1 to 5 rounds
    where one level at a time took about 13.
    filling_by_levels is the textbook's filling; tests/test_flows_incremental.py holds the two to each other.
    """
    n = caps.size
    if n == 0:
        return np.zeros(0)
    rate = np.zeros(n)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=float)
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
            limit = lowest + np.abs(lowest) * 1e-12
            lowest_here = share <= np.repeat(limit, count)  # the crossing's link is its flow's lowest
            everyones = np.bincount(link_of[~lowest_here], minlength=m) == 0  # every flow's there
            freeze = np.logical_or.reduceat(everyones[link_of], first) | (own <= limit)
            if not freeze.any():  # (the lowest level always freezes: only NaN or a negative capacity can stop it)
                raise FloatingPointError(f"max-min filling: no flow freezes at levels {lowest[:5]}...")
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
    """The flows in flight on a fabric: each in a slot of its own (its row of NumPy arrays: bytes left, the message's
    bytes, bytes/s since the last sharing, its path's cap, its weight in the sharing), kept until it ends; flows
    that start join at the next ``reshare``. Each link knows its flows (``on_link``), so that a change finds the
    few flows it reaches without reading every flow in flight."""

    def __init__(self, fabric: Fabric):
        self.capacity, self.fabric = fabric.capacity, fabric
        # weights_of: 1 / latency under RTT sharing; equal from the first flow of latency 0 on (then all re-shared)
        self.weighted = bool(getattr(fabric, "rtt_sharing", False))
        self.state = np.zeros((5, 0))  # rows: bytes left, the message's bytes, rate, cap, weight (views: _rows)
        self._rows()
        self.alive = np.zeros(0, dtype=bool)
        self.order = np.zeros(0, dtype=np.int64)  # when each flow started (flows that end together end in this order)
        self.route = np.zeros((0, 1), dtype=np.int64)  # each slot's links, then -1s
        self.messages: list = []  # (send, recv) of each slot
        self.routes: list[tuple[int, ...]] = []  # each slot's links
        self.free: list[int] = []  # the slots no flow holds
        self.on_link: list[set[int]] = [set() for _ in range(self.capacity.size)]  # the slots crossing each link
        self.through = np.zeros(self.capacity.size)  # caps_through: the caps of each link's flows, kept up to date
        self.count = 0  # flows in flight (in slots)
        self.started = 0
        self.reweighted = False  # the weights changed: share every flow anew
        self.starting: list[tuple] = []  # (send, recv, path) added since the last sharing, at ``now``
        self.now = 0.0
        self.dirty = False  # flows started or ended since the last sharing
        self.version = 0  # the sharing the pending "next end" event belongs to
        self.next_end = np.inf
        self._links: dict[tuple[int, ...], np.ndarray] = {}  # a route's links as an array, made once

    def _rows(self) -> None:
        self.left, self.size, self.rate, self.cap, self.weight = self.state

    @property
    def active(self) -> int:
        """Flows in flight (those that started since the last sharing included)."""
        return self.count + len(self.starting)

    def progress(self, now: float) -> None:
        """Move every flow on at its rate up to ``now`` (a free slot's rate is 0)."""
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
        """Remove the flows that have ended (their messages returned, in the order they started) and share the links
        anew among the flows a change can reach (``_share``). The others keep their rates."""
        start, self.starting = self.starting, []
        changed: list[int] = []  # links whose flows changed
        started = [self._start(send, recv, path, changed) for send, recv, path in start]
        ended = np.flatnonzero(self.alive & (self.left <= TOLERANCE * self.size))
        done = []
        if start or ended.size:
            either = (self.through > self.capacity).tobytes()  # binding with the started and the ended flows
            if ended.size > 1:
                ended = ended[np.argsort(self.order[ended])]
            gone = (self.rate[ended] / self.weight[ended]).min() if ended.size else np.inf  # the least level ended
            done = [self._end(slot, changed) for slot in ended.tolist()]
            if done and started:  # (a message of 0 bytes ends as it starts)
                started = [slot for slot in started if self.alive[slot]]
            if not self.count:  # none in flight: start again from exact zeros (no rounding left over)
                self.through[:] = 0.0
            seeds = list({link for link in changed if either[link]})
            if self.count and (seeds or started):
                self._share(seeds, started, float(gone))
        self.version += 1
        self.dirty = False
        moving = self.rate > 0
        self.next_end = self.now + (self.left[moving] / self.rate[moving]).min() if moving.any() else np.inf
        return done

    def _start(self, send, recv, path: Path, changed: list[int]) -> int:
        """A flow takes a free slot; returns the slot."""
        if not self.free:
            self._grow()
        slot = self.free.pop()
        links = self._array(path.links)
        if links.size > self.route.shape[1]:
            self.route = np.pad(self.route, ((0, 0), (0, links.size - self.route.shape[1])), constant_values=-1)
        self.route[slot, : links.size], self.route[slot, links.size :] = links, -1
        if self.weighted and path.latency <= 0:  # weights_of: no RTT weights with a latency of 0
            self.weighted, self.reweighted = False, True
            self.weight[:] = 1.0
        self.left[slot] = self.size[slot] = send.nbytes
        self.rate[slot], self.cap[slot] = 0.0, path.rate
        self.weight[slot] = 1.0 / path.latency if self.weighted else 1.0
        self.alive[slot], self.order[slot] = True, self.started
        self.messages[slot], self.routes[slot] = (send, recv), path.links
        self.through[links] += path.rate  # (a route crosses a link once: _array)
        for link in path.links:
            self.on_link[link].add(slot)
        changed.extend(path.links)
        self.count += 1
        self.started += 1
        return slot

    def _end(self, slot: int, changed: list[int]) -> tuple:
        """The flow in ``slot`` has ended: its slot is freed; returns its message."""
        links = self.routes[slot]
        self.through[self._links[links]] -= self.cap[slot]
        for link in links:
            self.on_link[link].discard(slot)
        changed.extend(links)
        self.alive[slot] = False
        self.rate[slot] = self.left[slot] = 0.0
        self.weight[slot] = 1.0
        message, self.messages[slot] = self.messages[slot], None
        self.free.append(slot)
        self.count -= 1
        return message

    def _grow(self) -> None:
        """Twice the slots (the new ones free)."""
        old = self.alive.size
        new = max(64, 2 * old)
        self.state = np.concatenate([self.state, np.zeros((5, new - old))], axis=1)
        self._rows()
        self.weight[old:] = 1.0
        self.alive = np.concatenate([self.alive, np.zeros(new - old, dtype=bool)])
        self.order = np.concatenate([self.order, np.zeros(new - old, dtype=np.int64)])
        self.route = np.concatenate([self.route, np.full((new - old, self.route.shape[1]), -1, dtype=np.int64)])
        self.messages += [None] * (new - old)
        self.routes += [()] * (new - old)
        self.free += range(new - 1, old - 1, -1)

    def _share(self, seeds: list[int], started: list[int], gone: float) -> None:
        """Share the links anew among the flows a change can reach: the flows that started (slots ``started``) and,
        of those at or above the change's level, the flows on a link of a started or ended flow that can limit a
        flow (``seeds``: ``binding`` with them or without them) and those connected to these through such links
        and flows at or above that level, and so on. ``gone``: the least level (rate / weight) of the flows that
        ended (inf if none).

        Two facts make the set small (on a torus a few percent of the flows in flight, often none). Max-min
        fairness shares each set of flows connected through binding links on its own. And the filling is the
        same with or without a flow f up to f's level: below it f's links are not full (f would freeze there),
        and every other link carries the same flows. So a flow that ends, or starts, leaves every flow that froze
        below its level as it was; a started flow's level is at least its cap / weight and the least share of
        its links (a link's share, its capacity over the weight of its flows, only grows as flows freeze). The
        flows at or above that level then share what the others leave of each link, and their filling from there
        is the same as from zero (they all grow past it)."""
        binds = self.through > self.capacity  # binding() now that the ended flows are gone
        flags = binds.tobytes()
        level = (self.rate / self.weight).tolist()
        least = min(gone, self._least_level(started, flags)) if KEEP_LOWER and not self.reweighted else -np.inf
        floor = least * (1 - 1e-12)  # the flows below it keep their rates
        if self.reweighted:  # the weights changed: every flow anew
            first, self.reweighted = set(np.flatnonzero(self.alive).tolist()), False
        else:
            first = set(started).union(*[{f for f in self.on_link[link] if level[f] >= floor} for link in seeds])
        near = _nearby(first, flags, self.on_link, self.routes, level, floor, self.rate.tolist(), self.capacity, NEARBY)
        if near is None:  # many: every flow in flight at or above the floor, and which the change reaches, in NumPy
            slots = np.flatnonzero(self.alive)
            capacity = self.capacity
            if least > -np.inf:  # what the flows below the floor leave of each link
                keep = (self.rate[slots] / self.weight[slots] < floor) & ~np.isin(slots, started)
                capacity = capacity - self._per_link(slots[keep], binds, self.rate)
                slots = slots[~keep]
            self._fill(slots, binds, capacity, np.searchsorted(slots, sorted(first)))
        elif len(near[0]) > BY_LEVELS:  # some: in NumPy, on what the others leave of their links
            capacity = self.capacity.copy()
            capacity[list(near[1])] = list(near[1].values())
            self._fill(np.array(sorted(near[0]), dtype=np.int64), binds, capacity)
        elif near[0]:  # a few: the textbook's filling, in Python
            few = sorted(near[0])
            weights = self.weight[few].tolist() if self.weighted else None
            links = [[link for link in self.routes[slot] if flags[link]] for slot in few]
            self.rate[few] = filling_by_levels(near[1], links, self.cap[few].tolist(), weights)

    def _crossings(self, slots: np.ndarray, binds: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(flow_of, link_of) of the flows in ``slots`` (flows numbered 0.. in that order) on binding links."""
        route = self.route[slots]
        crossing = np.append(binds, False)[route]  # (route's -1, no link, reads the last: False)
        return np.nonzero(crossing)[0], route[crossing]

    def _per_link(self, slots: np.ndarray, binds: np.ndarray, values: np.ndarray) -> np.ndarray:
        """(L,) the sum over the flows in ``slots`` of ``values`` (one a slot: rates, weights) on each binding link."""
        flow_of, link_of = self._crossings(slots, binds)
        return np.bincount(link_of, weights=values[slots][flow_of], minlength=binds.size)

    def _fill(
        self, slots: np.ndarray, binds: np.ndarray, capacity: np.ndarray, first: np.ndarray | None = None
    ) -> None:
        """Share ``capacity`` among the flows in ``slots``, or if ``first`` (positions in slots) is given, among those
        of them connected to these (_connected)."""
        flow_of, link_of = self._crossings(slots, binds)
        if first is not None:
            reached = _connected(slots.size, binds.size, flow_of, link_of, first)
            if not reached.all():
                entries = reached[flow_of]
                flow_of, link_of = (np.cumsum(reached) - 1)[flow_of[entries]], link_of[entries]  # as 0..m-1
                slots = slots[reached]
        weights = self.weight[slots] if self.weighted else None
        self.rate[slots] = _progressive_filling(capacity, flow_of, link_of, self.cap[slots], weights)

    def _least_level(self, started: list[int], flags: bytes) -> float:
        """The least level (rate / weight) the started flows can have: each's cap / weight and the share of each of
        its binding links (``flags``), its capacity over the weight of its flows."""
        if not started:
            return np.inf
        least = float((self.cap[started] / self.weight[started]).min())
        if len(started) > 4:  # many (flows that start together): every link's weight at once
            binds = np.frombuffer(flags, dtype=bool)
            weight = self._per_link(np.flatnonzero(self.alive), binds, self.weight)
            links = self._crossings(np.array(started), binds)[1]
            return min(least, float((self.capacity[links] / weight[links]).min(initial=np.inf)))
        for slot in started:
            for link in self.routes[slot]:
                if flags[link]:
                    least = min(least, self.capacity[link] / sum(self.weight[f] for f in self.on_link[link]))
        return float(least)

    def _array(self, links: tuple[int, ...]) -> np.ndarray:
        """A route's links as an array, made once."""
        if links not in self._links:
            if len(set(links)) < len(links):  # through's updates add a flow's cap once a link
                raise ValueError(f"flows: a route crosses a link twice: {links}")
            self._links[links] = np.array(links, dtype=np.int64)
        return self._links[links]


def _nearby(
    first: set[int],
    flags: bytes,
    on_link: list[set[int]],
    routes: list,
    level: list[float],
    floor: float,
    rate: list[float],
    capacity: np.ndarray,
    most: int,
) -> tuple[set[int], dict[int, float]] | None:
    """The slots ``first`` and those at or above ``floor`` (``level``: rate / weight of each slot) connected to them
    through binding links (``flags``: one byte a link, nonzero where it can limit a flow), found link by link from
    each link's flows (``on_link``); and of each of their binding links, the capacity that the flows below the
    floor leave (``rate``). None once more than ``most`` are found: then _connected looks at every flow at once,
    in NumPy."""
    if len(first) > most:
        return None
    reached, left, frontier = set(first), {}, list(first)
    while frontier:
        for link in routes[frontier.pop()]:
            if flags[link] and link not in left:
                free = float(capacity[link])
                for f in on_link[link]:
                    if f in reached:
                        continue
                    if level[f] >= floor:
                        reached.add(f)
                        frontier.append(f)
                    else:
                        free -= rate[f]
                left[link] = free
                if len(reached) > most:
                    return None
    return reached, left


KEEP_LOWER = True  # _share: a change re-shares only the flows at or above its level
NEARBY = 48  # _nearby follows the links of at most this many flows before the change is shared in NumPy
BY_LEVELS = 12  # up to this many flows are shared by filling_by_levels (in Python: faster than NumPy for a few)


def _connected(n: int, links: int, flow_of: np.ndarray, link_of: np.ndarray, flows: np.ndarray) -> np.ndarray:
    """Which of n flows are ``flows`` or connected to them through the crossings: entry e of flow_of / link_of is
    flow flow_of[e] on link link_of[e], of ``links`` (those that can limit a flow, ``binding``): an (n,) mask."""
    touched = np.zeros(n, dtype=bool)
    touched[flows] = True
    marked = np.zeros(links, dtype=bool)
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
