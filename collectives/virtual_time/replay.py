"""Replay traced collectives in virtual time: how long would this run take on that network?

``replay(traces, network)`` takes the p ranks' traces (trace.py) and plays them as MPI would:
a receive is matched to the first pending send from its source with its tag (non-overtaking),
sends are synchronous (rendezvous: as SimulatedComm, a send completes when its message has
arrived), Sendrecv posts both and waits for both, Isend/Irecv post and Wait waits. All ranks start
at time 0. A message starts when both its send and its receive are posted, takes its path's
latency alpha and then moves its bytes at the rate the network gives it; a reduction of n bytes
keeps its rank busy n gamma. On ``crossbar`` a message of n bytes takes alpha + n beta exactly,
so the closed forms of cost.py come out: ring, tree, recursive doubling, Rabenseifner and naive to
1e-9 (tests/test_replay.py). Where the replay and a formula differ, it is on purpose:
- cost.py's n/p assumes equal blocks; with unequal ones (n not a multiple of p, or of p' for
  Rabenseifner) the replay lies between the formula for n cut down and padded up to a multiple;
- naive.gather and naive.scatter post every Irecv (Isend) at once, so on crossbar the root's p - 1
  messages overlap: alpha + m beta in all, where naive.py's (p - 1)(alpha + m beta) counts them one
  at a time. On a network where the root has one NIC (switch, fat tree, torus) they share it:
  alpha + (p - 1) m beta. naive.allreduce receives with Recv in rank order: the formula exactly.
On a network with shared links the flows in flight share them max-min fairly (flows.py),
re-shared whenever a flow starts or ends.

    t = allreduce_time("ring", 64, 100 << 20, network="10gbe")   # seconds of the slowest rank

The engine is a discrete-event simulation, one Python step per call and message (about a
microsecond or ten each): fine up to some hundred ranks. ``rounds.py`` replays lockstep schedules
(ring, recursive doubling, Rabenseifner on powers of two) a round at a time with NumPy, for p in
the thousands; allreduce_time uses it from p = ROUNDS_FROM on.
"""

from __future__ import annotations

import functools
import heapq
from collections import deque
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.cost import CostParams, get_params
from collectives.virtual_time.network import Fabric, Network, get_network
from collectives.virtual_time.rounds import (
    NotLockstep,
    Schedule,
    formula_time,
    replay_rounds,
    schedule_from_traces,
    symmetric_schedule,
)
from collectives.virtual_time.trace import CALLS, ISEND, RECV, REDUCE, SEND, SENDRECV, WAIT, Row, trace_rows


class DeadlockError(RuntimeError):
    """The replayed ranks wait for messages no rank will send; the message says who waits in what."""


@dataclass
class Result:
    """Virtual seconds at which each rank finished, and the messages replayed."""

    finish: np.ndarray  # shape (p,)
    messages: int

    @property
    def time(self) -> float:
        """The slowest rank's time: the collective's."""
        return float(self.finish.max(initial=0.0))


class _Request:
    __slots__ = ("owner", "send", "peer", "tag", "context", "nbytes", "done", "row")

    def __init__(self, owner: int, send: bool, peer: int, tag: int, context: int, nbytes: int, row: Row):
        self.owner, self.send, self.peer, self.tag, self.context, self.nbytes = owner, send, peer, tag, context, nbytes
        self.done, self.row = False, row


class _Engine:
    """The state of one replay: ranks' program counters and clocks, pending requests, messages in flight."""

    def __init__(self, traces: list[list[Row]], fabric: Fabric):
        self.traces, self.fabric, self.p = traces, fabric, len(traces)
        self.pc = [0] * self.p
        self.clock = np.zeros(self.p)
        self.finished = [False] * self.p
        self.blocked: list[list[_Request] | None] = [None] * self.p  # what a blocked rank waits for
        self.requests: list[dict[int, _Request]] = [{} for _ in range(self.p)]  # Isend/Irecv ids
        self.unmatched: dict[tuple, deque] = {}  # (src, dst, tag, context, is_send) -> requests in order
        self.heap: list = []
        self.seq = 0
        self.messages = 0
        from collectives.virtual_time.flows import Flows  # contention: max-min fair sharing of the links

        self.flows = Flows(fabric) if fabric.contention else None

    def push(self, time: float, kind: int, item: Any) -> None:
        self.seq += 1
        heapq.heappush(self.heap, (time, self.seq, kind, item))

    # -- one rank's calls --------------------------------------------------------------------------
    def run(self, rank: int, now: float) -> None:
        """Execute the rank's calls from its program counter until it blocks, computes or finishes."""
        rows, pc = self.traces[rank], self.pc[rank]
        while pc < len(rows):
            row = rows[pc]
            pc += 1
            code = row[0]
            if code == REDUCE:
                self.pc[rank] = pc
                self.push(now + row[3] * self.fabric.gamma, 0, rank)
                return
            if code == WAIT:
                wait = [self.requests[rank].pop(row[7])]
            elif code == SENDRECV:
                wait = [self.post(rank, False, row[4], row[5], row[8], row[6], row, now)]
                wait.append(self.post(rank, True, row[1], row[2], row[8], row[3], row, now))
            elif code in (SEND, RECV):
                wait = [self.post(rank, code == SEND, row[1], row[2], row[8], row[3], row, now)]
            else:  # ISEND, IRECV
                self.requests[rank][row[7]] = self.post(rank, code == ISEND, row[1], row[2], row[8], row[3], row, now)
                continue
            if not all(r.done for r in wait):
                self.pc[rank], self.blocked[rank] = pc, wait
                return
        self.pc[rank], self.finished[rank], self.clock[rank] = pc, True, now

    def post(self, rank: int, send: bool, peer: int, tag: int, context: int, nbytes: int, row: Row, now: float):
        if peer < 0 or tag < 0:
            raise ValueError(
                f"replay: rank {rank}'s {CALLS[row[0]]} uses ANY_SOURCE or ANY_TAG, which cannot be replayed"
            )
        request = _Request(rank, send, peer, tag, context, nbytes, row)
        src, dst = (rank, peer) if send else (peer, rank)
        other = self.unmatched.get((src, dst, tag, context, not send))
        if other:  # the first pending request of the other side: MPI's order
            match = other.popleft()
            if send:
                self.start(request, match, now)
            else:
                self.start(match, request, now)
        else:
            self.unmatched.setdefault((src, dst, tag, context, send), deque()).append(request)
        return request

    # -- messages ----------------------------------------------------------------------------------
    def start(self, send: _Request, recv: _Request, now: float) -> None:
        """Both sides are posted: the message goes (a receive buffer smaller than the message is MPI's error)."""
        if send.nbytes > recv.nbytes:
            raise ValueError(
                f"replay: message truncated: rank {recv.owner} receives {send.nbytes} bytes from rank {send.owner} "
                f"(tag {send.tag}) into {recv.nbytes} bytes"
            )
        self.messages += 1
        path = self.fabric.path(send.owner, recv.owner)
        if self.flows is None or not path.links:
            self.push(now + path.latency + send.nbytes / path.rate, 1, (send, recv))
        else:
            self.push(now + path.latency, 2, (send, recv, path))  # then its bytes join the flows

    def complete(self, message: tuple, now: float) -> None:
        for request in message[:2]:
            request.done = True
            rank = request.owner
            waiting = self.blocked[rank]
            if waiting is not None and all(r.done for r in waiting):
                self.blocked[rank] = None
                self.push(now, 0, rank)

    # -- the loop ----------------------------------------------------------------------------------
    def replay(self) -> Result:
        for rank in range(self.p):
            self.push(0.0, 0, rank)
        heap, flows = self.heap, self.flows
        while heap or (flows is not None and flows.active):
            if flows is not None and flows.dirty and (not heap or heap[0][0] > flows.now):
                for message in flows.reshare():  # all changes at this time are in: share the links anew
                    self.complete(message, flows.now)
                if flows.next_end < np.inf:
                    self.push(flows.next_end, 3, flows.version)
                continue
            now, _, kind, item = heapq.heappop(heap)
            if kind == 0:
                self.run(item, now)
            elif kind == 1:
                self.complete(item, now)
            elif flows is None:
                raise AssertionError("a flow event on a network without contention")
            elif kind == 2:
                flows.add(now, item)
            elif item == flows.version:  # kind 3: the next flow ends (unless the sharing changed since)
                flows.advance(now)
        self.check_finished()
        return Result(self.clock.copy(), self.messages)

    def check_finished(self) -> None:
        if all(self.finished) and not any(self.unmatched.values()):
            return
        lines = ["deadlock: the replayed ranks wait for messages no rank sends"]
        for rank in range(self.p):
            if self.finished[rank]:
                lines.append(f"  rank {rank}: finished")
                continue
            pending = [describe(r) for r in self.blocked[rank] or [] if not r.done]
            lines.append(f"  rank {rank}: blocked in " + "; ".join(pending))
        leftover = [
            f"rank {r.owner} {describe(r)}" for q in self.unmatched.values() for r in q if self.finished[r.owner]
        ]
        lines += [f"  never matched: {text}" for text in leftover[:10]]
        raise DeadlockError("\n".join(lines))


def describe(r: _Request) -> str:
    call = CALLS[r.row[0]].capitalize()
    if r.send:
        return f"{call}(dest={r.peer}, tag={r.tag}, {r.nbytes} bytes) not received"
    return f"{call}(source={r.peer}, tag={r.tag}, buffer of {r.nbytes} bytes) with no matching send"


def replay(
    traces: list[list[Row]], network: str | Network = "crossbar", params: CostParams | None = None, **options: Any
) -> Result:
    """Play the p ranks' traces (rows or Events, trace.py) on ``network``; each rank's finish time.

    ``network``: a name (network.known_networks()) or a Network; ``params`` (default
    cost.get_params()): the model of "crossbar", and gamma for the named links; ``options``
    (ranks_per_node, topology, leaf_size, oversubscription, dims, intra) build a network.Cluster
    around a named link. Raises DeadlockError naming each rank's pending calls when no rank can go on.
    """
    rows = [[_as_row(e) for e in events] for events in traces]
    fabric = get_network(network, params, **options).fabric(len(rows))
    return _Engine(rows, fabric).replay()


def _as_row(event: Any) -> Row:
    if isinstance(event[0], str):  # an Event
        return (CALLS.index(event[0]), *event[1:])
    return event


ROUNDS_FROM = 64  # from this p on, allreduce_time replays lockstep schedules by rounds (rounds.py)


@functools.lru_cache(maxsize=64)
def _symmetric(algorithm: str, p: int, nbytes: int, dtype: str, check: bool) -> Schedule | None:
    """symmetric_schedule, kept: simulation_estimate asks for it before the run that then uses it."""
    return symmetric_schedule(algorithm, p, nbytes, dtype=dtype, check=check)


@functools.lru_cache(maxsize=64)
def _schedule(algorithm: str, p: int, nbytes: int, dtype: str, check: bool) -> Schedule | None:
    """The lockstep rounds of the call (from rank 0's trace when the ranks are its relabellings), or None."""
    schedule = _symmetric(algorithm, p, nbytes, dtype, check)
    if schedule is not None:
        return schedule
    try:
        return schedule_from_traces(_traces(algorithm, p, nbytes, dtype, check))
    except NotLockstep:
        return None


@functools.lru_cache(maxsize=64)
def _traces(algorithm: str, p: int, nbytes: int, dtype: str, check: bool) -> list[list[Row]]:
    """Traces are the same for every network: kept for the next call (sim-train asks for the same buckets often)."""
    return trace_rows(algorithm, p, nbytes, dtype=dtype, check=check)


def allreduce_time(
    algorithm: str,
    p: int,
    nbytes: int,
    network: str | Network = "crossbar",
    params: CostParams | None = None,
    *,
    dtype: Any = np.float32,
    check: bool = False,
    engine: str = "auto",
    **options: Any,
) -> float:
    """Virtual seconds of one allreduce of ``nbytes`` per rank on ``p`` ranks (the slowest rank's).

    ``algorithm``: one of cost.ALGORITHMS, "hierarchical" or "hierarchical_rs" (algorithms/hierarchical.py's
    leader and reduce-scatter schedules, its nodes the network's ``ranks_per_node``), or "auto" (see below).
    ``network``: "crossbar" (cost.py's model, no contention), a named link ("1gbe", "10gbe",
    "25gbe", "ib-fdr", "ib-edr", "ib-hdr", "omnipath100", "shm": network.LINKS) or a Network.
    ``params``: a cost.CostParams (default cost.get_params()): the model of "crossbar", and gamma
    (the CPUs) for every network. ``options`` for a named network (network.Cluster):
    ``ranks_per_node`` (default 1; ranks of a node talk through shared memory), ``topology`` ("switch"
    by default, "crossbar", "fattree", "dragonfly", "torus" (any ``dims``), "torus2d", "torus3d"), ``leaf_size``,
    ``oversubscription``, ``routing`` ("trunk", the default: a leaf's uplinks as one trunk; "static": links of
    their own, a flow on uplink destination mod uplinks, as InfiniBand's D-mod-K), ``pod_size`` and
    ``spine_oversubscription`` (a third level) for fattree, ``router_size``, ``group_size``, ``local_links`` and
    ``global_links`` for "dragonfly", ``dims`` (torus), ``intra`` (the link within a node).
    ``link_latency``: seconds per link of a message's route, on top of the per-message alpha
    (network.Cluster: 2 links on a crossbar or switch, 2, 4 or 6 on a fat tree, one per hop on a torus).
    ``check``: include the agreement check. ``engine``: "events" (replay.py, the reference),
    "rounds" (rounds.py: lockstep schedules only, NotLockstep otherwise), "formula" (rounds.formula_time:
    cost.py's rounds with their routes' latency and sharing, equal blocks) or "auto": rounds from
    p = ROUNDS_FROM on when the schedule is lockstep, else events. ``algorithm="auto"``: the
    fastest of cost.ALGORITHMS as this engine finds it on this network. Traces and schedules are
    cached per (algorithm, p, nbytes, dtype, check), and for a named network the time itself, so that
    timing a training step's buckets again and again costs nothing.
    """
    if not isinstance(p, (int, np.integer)) or p < 1:
        raise ValueError(f"allreduce_time: p must be a positive integer, got {p!r}")
    params = params or get_params()
    frozen = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in options.items()))
    if isinstance(network, str):  # a named network: the answer is a function of the arguments, remembered
        return _named_time(algorithm, int(p), int(nbytes), network, params, np.dtype(dtype).str, check, engine, frozen)
    return _time(algorithm, int(p), int(nbytes), network, params, dtype, check, engine, options)


@functools.lru_cache(maxsize=4096)
def _named_time(algorithm, p, nbytes, network, params, dtype, check, engine, options) -> float:
    return _time(algorithm, p, nbytes, network, params, dtype, check, engine, dict(options))


def _fastest(p, nbytes, network, params, dtype, check, engine, options) -> float:
    """The least simulated time of cost.ALGORITHMS, cheapest bound first; an algorithm whose lower bound (half
    cost.predict on the network's fastest link: contention only adds) is above the best found is not simulated."""
    from collectives.cost import ALGORITHMS, predict

    net = get_network(network, params, **options)
    links = [getattr(net, "link", None), getattr(net, "intra", None)]
    fastest = [link for link in links if link is not None]
    c = net.params
    if fastest:
        c = CostParams(min(link.alpha for link in fastest), min(link.beta for link in fastest), c.gamma)
    bounds = sorted((0.5 * predict(a, p, nbytes, c), a) for a in ALGORITHMS)
    best = np.inf
    for bound, algorithm in bounds:
        if bound < best:
            best = min(best, _time(algorithm, p, nbytes, network, params, dtype, check, engine, options))
    return float(best)


def _leader_time(k, p, nbytes, network, params, dtype, engine, options) -> float:
    """hierarchical.py's leader schedule on nodes of k ranks, by its parts: the tree allreduce on one node (steps 1
    and 3: its reduce ends before the broadcast starts on every rank, and step 2 only delays the broadcast) plus
    the ring among the leaders, a cluster of p / k nodes of one rank (step 2; the rounds engine from ROUNDS_FROM
    leaders on).

    The same as the event replay of every rank (tests/test_hierarchical.py holds it to it): the nodes' links are
    their own (network.Cluster: no contention within a node), so every leader starts step 2 at the same time,
    and no other rank sends while the leaders do."""
    node = {"ranks_per_node": k, **({"intra": options["intra"]} if "intra" in options else {})}  # no route: no links
    leaders = {**options, "ranks_per_node": 1}
    inside = _time("tree", k, nbytes, network, params, dtype, False, "events", node)
    return inside + _time("ring", p // k, nbytes, network, params, dtype, False, engine, leaders)


def _time(algorithm, p, nbytes, network, params, dtype, check, engine, options) -> float:
    """allreduce_time after its arguments are checked (see there)."""

    if engine not in ("auto", "events", "rounds", "formula"):
        raise ValueError(f"allreduce_time: unknown engine {engine!r}: expected auto, events, rounds or formula")
    if algorithm == "auto":  # the fastest on this network, as simulated (the topology and contention included)
        return _fastest(p, nbytes, network, params, dtype, check, engine, options)
    if algorithm in ("hierarchical", "hierarchical_rs"):  # hierarchical.py's nodes are the network's (default 1)
        algorithm = f"{algorithm}:{int(options.get('ranks_per_node', 1))}"
    rounds = engine == "rounds" or (engine == "auto" and p >= ROUNDS_FROM)
    leader = isinstance(network, str) and algorithm.startswith("hierarchical:") and not check
    if rounds and leader and int(algorithm[13:]) > 1:
        return _leader_time(int(algorithm[13:]), p, nbytes, network, params, dtype, engine, options)
    net = get_network(network, params, **options)
    if engine == "formula":  # cost.py's rounds with the links' latency and their sharing
        return formula_time(algorithm, p, nbytes, net.fabric(int(p)), net.params.alpha)
    key = (algorithm, p, nbytes, np.dtype(dtype).str, bool(check))
    if rounds:
        schedule = _schedule(*key)  # traces first: they say when p will not fit, before anything is built
        if schedule is not None:
            return float(replay_rounds(schedule, net.fabric(int(p))).max())
        if engine == "rounds":
            raise NotLockstep(f"allreduce_time: {algorithm} on p={p} is not lockstep: use engine='events'")
    traces = _traces(*key)
    return _Engine(traces, net.fabric(int(p))).replay().time


# What a simulation costs here, measured on the development machine (2 shared cores, so on the slow side): the
# event engine traces and replays ~1.5e5 events a second (a ring on 1,024 ranks, 6.3e6 events: 40 s), and any
# algorithm costs ~3 ms a rank beyond that (a tree on 20,000 ranks: 58 s); the rounds engine ~5e-5 s a round
# plus 3e-8 s a rank and round (a ring on 4,096 ranks, 8,190 rounds: 1.3 s), plus the max-min sharing of each
# pattern of peers, up to ~2e-5 s a rank on a torus (recursive doubling on 16x16x16: 12 patterns, 0.8 s).
EVENTS_PER_SECOND = 1.5e5
SECONDS_PER_RANK = 3e-3
ROUND_SECONDS, RANK_ROUND_SECONDS, PATTERN_RANK_SECONDS = 5e-5, 3e-8, 2e-5


def simulation_estimate(
    algorithm: str, p: int, nbytes: int, ranks_per_node: int = 1, dtype: Any = np.float32, limit: float = np.inf
) -> tuple[float, int]:
    """(seconds, bytes of traces) that ``allreduce_time(algorithm, p, nbytes, <named network>,
    ranks_per_node=...)`` will take here, from the engine it will use, as allreduce_time chooses it:

    - from p = ROUNDS_FROM on, a schedule that is rank 0's relabelled (or rotating: ring, hierarchical_rs) is
      replayed by rounds: rounds x (ROUND_SECONDS + p RANK_ROUND_SECONDS) + patterns x p PATTERN_RANK_SECONDS,
      and no trace but a sample's is kept (finding the schedule traces rank 0 and a few others, and is kept for
      the run);
    - "hierarchical" on nodes of k > 1 ranks is the tree inside a node plus the ring among p / k leaders;
    - anything else traces every rank and replays the events: events_estimate / EVENTS_PER_SECOND, or p x
      SECONDS_PER_RANK if more, and holds EVENT_BYTES an event;
    - "auto" is every algorithm of cost.ALGORITHMS (the most it can take: it skips those that cannot win).

    An estimate by rounds above ``limit`` seconds is returned as it is, without tracing the sample.
    """
    from collectives.cost import ALGORITHMS
    from collectives.virtual_time.trace import EVENT_BYTES, events_estimate

    if p < 2:
        return 0.0, 0
    if algorithm == "auto":
        parts = [simulation_estimate(a, p, nbytes, ranks_per_node, dtype, limit) for a in ALGORITHMS]
        return sum(s for s, _ in parts), max(b for _, b in parts)
    name = f"{algorithm}:{ranks_per_node}" if algorithm in ("hierarchical", "hierarchical_rs") else algorithm
    events = events_estimate(name, p)
    traced = max(events / EVENTS_PER_SECOND, p * SECONDS_PER_RANK), events * EVENT_BYTES
    if p < ROUNDS_FROM:
        return traced
    if algorithm == "hierarchical" and ranks_per_node > 1:
        inside = simulation_estimate("tree", ranks_per_node, nbytes, 1, dtype, limit)
        leaders = simulation_estimate("ring", p // ranks_per_node, nbytes, 1, dtype, limit)
        return inside[0] + leaders[0], max(inside[1], leaders[1])
    rounds = max(1, events // (3 * p))  # events_estimate counts 3 a message: rounds of one message a rank
    by_rounds = rounds * (ROUND_SECONDS + p * RANK_ROUND_SECONDS)
    if by_rounds > min(traced[0], limit):  # even by rounds too long: no sample traced to see if it is lockstep
        return traced if by_rounds > traced[0] else (by_rounds, 0)
    schedule = _symmetric(name, p, 4 * -(-int(nbytes) // 4), np.dtype(dtype).str, False)
    if schedule is None:
        return traced
    patterns = len(np.unique(schedule.dst[:, 0])) if schedule.relabel is not None else schedule.rounds
    return by_rounds + patterns * p * PATTERN_RANK_SECONDS, 0
