"""Replay lockstep schedules a round at a time with NumPy: the ring, recursive doubling and Rabenseifner at p in the thousands.

A schedule is lockstep when every rank's trace is the same number of rounds, each one Sendrecv
(and the reduction after it), and in round k the rank r sends to has rank r as its source in its
own round k. Ring, recursive doubling and Rabenseifner on powers of two are (without the
agreement check). Then the replay of replay.py reduces to a recurrence over all ranks at once:
with T the times at which the ranks start round k, dst/src the peers, n the bytes,

    E = max(T, T[dst]) + latency + n / rate        # my message to dst: both sides posted, then sent
    T = max(E, E[src]) + reduced * gamma           # my Sendrecv ends when both messages have

which is exactly what the event engine computes when no link is shared. On shared links the
rates are the max-min fair shares of the round's flows all in flight together (flows.py): exact
when the ranks enter the round together with equal messages (the ring on a switch, recursive
doubling on a fat tree), an approximation otherwise (flows that would end at different times are
not re-shared within the round). Rates are computed once per pattern of peers.

Tracing every rank through the real code costs a few microseconds per call, p x 2(p - 1) calls
for the ring: minutes at p = 4096. ``symmetric_schedule`` traces rank 0, finds the relabelling
that maps it to the others (rank r's peers are rank 0's shifted by r, or XORed with r), checks it
against the real traces of a sample of ranks, and builds every rank's rounds from rank 0's (the
ring with unequal blocks: ``ring_schedule``, its blocks rotating with the rank, checked the same way).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from collectives.virtual_time.flows import max_min_rates, weights_of
from collectives.virtual_time.network import Fabric
from collectives.virtual_time.trace import CALLS, REDUCE, SENDRECV, Row, trace_rows


class NotLockstep(ValueError):
    """The traces are not rounds of one Sendrecv per rank with matching peers (use the event engine)."""


@dataclass
class Schedule:
    """Rounds of a lockstep schedule: arrays of shape (K, p), or (K, 1) when every rank has the same.

    With ``relabel``, dst and src hold rank 0's peers and rank r's are relabel(rank 0's, r, p)
    (made a round at a time: memory O(p), not O(K p)). With ``size_of`` (round k, ranks) -> (bytes sent,
    bytes reduced), the sizes too are made a round at a time, and nbytes and reduced are not read: the ring
    whose blocks are unequal (``ring_schedule``: its ``blocks`` rotate with the rank) and the node-aware
    ring (``node_ring_schedule``).
    """

    p: int
    dst: np.ndarray  # the rank each rank sends to in round k
    src: np.ndarray  # the rank each rank receives from
    nbytes: np.ndarray  # bytes each rank sends
    reduced: np.ndarray  # bytes each rank reduces after the round
    relabel: Callable | None = None
    blocks: np.ndarray | None = None  # ring_schedule's (p,) bytes of each block
    size_of: Callable[[Any, np.ndarray], tuple[np.ndarray, np.ndarray]] | None = None

    @property
    def rounds(self) -> int:
        return self.dst.shape[0]

    def of_rank(self, rank: int) -> np.ndarray:
        """One rank's rounds, shape (K, 4): dst, src, bytes sent, bytes reduced."""
        column = 0 if self.dst.shape[1] == 1 else rank
        dst, src = self.dst[:, column], self.src[:, column]
        if self.relabel is not None:
            dst, src = self.relabel(dst, rank, self.p), self.relabel(src, rank, self.p)
        if self.size_of is None:
            sent, reduced = self.nbytes[:, column], self.reduced[:, column]
        else:
            sent, reduced = self.size_of(np.arange(self.rounds), np.full(self.rounds, rank))
        return np.stack([dst, src, sent, reduced], axis=1)

    def sizes(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """Bytes each rank sends and reduces in round k, shape (p,) or (1,)."""
        if self.size_of is None:
            return self.nbytes[k], self.reduced[k]
        return self.size_of(k, np.arange(self.p))

    def peers(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """dst and src of every rank in round k, shape (p,)."""
        if self.relabel is None:
            return self.dst[k], self.src[k]
        ranks = np.arange(self.p)
        return self.relabel(self.dst[k, 0], ranks, self.p), self.relabel(self.src[k, 0], ranks, self.p)


def _rounds_of(rows: list[Row], rank: int) -> list[tuple[int, int, int, int, int, int]]:
    """(dst, sendtag, bytes, src, recvtag, reduced) per round of one rank, or NotLockstep."""
    out: list[list[int]] = []
    for row in rows:
        if row[0] == SENDRECV:
            out.append([row[1], row[2], row[3], row[4], row[5], 0])
        elif row[0] == REDUCE and out:
            out[-1][5] += row[3]
        else:
            raise NotLockstep(f"rank {rank}'s trace has a {CALLS[row[0]]} outside the Sendrecv rounds")
    return [tuple(r) for r in out]  # type: ignore[misc]


def schedule_from_traces(traces: list[list[Row]]) -> Schedule:
    """The rounds of full traces (every rank traced), checked to be lockstep."""
    per_rank = [_rounds_of(rows, r) for r, rows in enumerate(traces)]
    if len({len(r) for r in per_rank}) > 1:
        raise NotLockstep("ranks have different numbers of rounds")
    table = np.array(per_rank, dtype=np.int64).reshape(len(traces), -1, 6).transpose(1, 2, 0)  # (K, 6, p)
    schedule = Schedule(len(traces), table[:, 0], table[:, 3], table[:, 2], table[:, 5])
    _check_matching(schedule, table[:, 1], table[:, 4])
    return schedule


def _check_matching(s: Schedule, sendtag: np.ndarray, recvtag: np.ndarray) -> None:
    """Round by round: the rank I send to receives from me, with my tag (arrays (K, p) or (K, 1))."""
    ranks = np.arange(s.p)
    for k in range(s.rounds):
        dst, src = s.peers(k)
        theirs = np.broadcast_to(recvtag[k], (s.p,))[dst]
        if (src[dst] != ranks).any() or (theirs != sendtag[k]).any():
            raise NotLockstep(f"round {k}: a rank's message is not what its peer receives in that round")


def symmetric_schedule(
    algorithm: str, p: int, nbytes: int, dtype: Any = np.float32, check: bool = False, samples: int = 6
) -> Schedule | None:
    """Every rank's rounds from rank 0's trace, relabelled (shift or XOR), checked on a sample of real traces.

    The ring whose blocks are unequal (n not a multiple of p) is no relabelling of rank 0 (a rank's
    message sizes rotate with it): ring_schedule, checked on the same sample; hierarchical_rs likewise
    (node_ring_schedule). None when nothing
    reproduces the sample (the caller traces every rank instead).
    """
    drawn = np.random.default_rng(p).integers(1, p, samples).tolist() if p > 1 else []
    sample = sorted({1, p // 2, p - 1, *drawn} - {0}) if p > 1 else []
    traced = trace_rows(algorithm, p, nbytes, dtype=dtype, check=check, ranks=[0, *sample])
    for relabel in (_shift, _xor, *_node_shifts(algorithm, p)):
        if relabel is _xor and p & (p - 1):
            continue
        if all(_relabelled(traced[0], r, p, relabel) == rows for r, rows in zip(sample, traced[1:])):
            try:
                (rounds,) = [_rounds_of(traced[0], 0)]
            except NotLockstep:
                return None
            table = np.array(rounds, dtype=np.int64).reshape(-1, 6)  # (K, 6) of rank 0
            schedule = Schedule(p, table[:, 0:1], table[:, 3:4], table[:, 2:3], table[:, 5:6], relabel)
            _check_matching(schedule, table[:, 1:2], table[:, 4:5])
            return schedule
    head, _, k = algorithm.partition(":")
    if p > 1 and (algorithm == "ring" or head == "hierarchical_rs" and k.isdigit() and p % int(k) == 0):
        # unequal blocks: the sizes rotate with the rank (ring_schedule) or with its node and local rank
        rotating = (
            ring_schedule(p, nbytes, dtype) if algorithm == "ring" else node_ring_schedule(p, int(k), nbytes, dtype)
        )
        if matches(rotating, dict(zip([0, *sample], traced))):
            return rotating
    return None


def ring_schedule(p: int, nbytes: int, dtype: Any = np.float32) -> Schedule:
    """The ring's rounds whatever the divisibility: rank r's blocks are rank 0's shifted by r (ring.py's indices).

    Blocks as common.block_bounds cuts n elements; which block a rank sends and reduces in each round:
    ``ring_shifts``. The caller holds it to the real traces of a sample of ranks (``matches``).
    """
    from collectives.common import block_bounds

    itemsize = np.dtype(dtype).itemsize
    blocks = np.diff(np.array(block_bounds(nbytes // itemsize, p), dtype=np.int64)) * itemsize
    send, reduced = ring_shifts(p)
    one = np.ones((2 * (p - 1), 1), dtype=np.int64)
    size_of = _rotating(blocks[None, :], send, reduced, lambda r: 0 * r, lambda r: r)
    return Schedule(p, one, (p - 1) * one, 0 * one, 0 * one, _shift, blocks, size_of)


def ring_shifts(q: int) -> tuple[np.ndarray, np.ndarray]:
    """The ring allreduce's blocks on q ranks relative to the rank (ring.py's indices), shape (2 (q - 1),) each.

    Reduce-scatter step s: rank r sends block r - s - 1 and reduces block r - s - 2; allgather step s: it sends
    block r - s (mod q) and reduces none (-1).
    """
    steps = np.arange(q - 1)
    send = np.concatenate([(-steps - 1) % q, (-steps) % q])
    reduced = np.concatenate([(-steps - 2) % q, np.full(q - 1, -1)])
    return send, reduced


def _rotating(table: np.ndarray, send: np.ndarray, reduced: np.ndarray, row_of: Callable, col_of: Callable) -> Callable:
    """size_of for blocks that rotate with the rank: rank r's block in round k is table[row_of(r), (col_of(r) +
    shift_k) mod C] for table (R, C) of bytes, the shifts ``send`` and ``reduced`` (-1: nothing reduced).

    k and the ranks broadcast together: (round, all ranks) for the replay, (all rounds, one rank) for ``matches``.
    """
    columns = table.shape[1]
    send, reduced = (shifts if shifts.size else np.array([fill]) for shifts, fill in ((send, 0), (reduced, -1)))

    def size_of(k: Any, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        flat = table[0] if table.shape[0] == 1 else None  # one row: 1-D indexing, the ring's (the faster)
        row, col = (None if flat is not None else row_of(ranks)), col_of(ranks)
        pick = (lambda c: flat[c]) if flat is not None else (lambda c: table[row, c])
        k = np.minimum(k, send.size - 1)  # a ring of one rank has no rounds: nothing asks for them
        sent = pick((col + send[k]) % columns)
        if np.ndim(k) == 0 and reduced[k] < 0:
            return sent, np.zeros_like(sent)
        return sent, np.where(reduced[k] >= 0, pick((col + reduced[k]) % columns), 0)

    return size_of


def node_ring_schedule(p: int, k: int, nbytes: int, dtype: Any = np.float32) -> Schedule:
    """hierarchical_rs on nodes of k ranks (hierarchical.py's rs schedule) whatever the divisibility.

    Rank r = (node m, local rank j), N = p / k nodes: a ring reduce-scatter inside the node over the k blocks
    of common.block_bounds(n, k), a ring allreduce across the nodes of block j (cut in N), a ring allgather
    inside: ``ring_shifts`` of k, of N, of k. Rank r's peers are rank 0's under the shift of node and local
    rank (``_node_shifts``), its blocks rotate with j inside and with m across. The caller holds it to the
    real traces of a sample of ranks (``matches``).
    """
    from collectives.common import block_bounds

    itemsize, nodes = np.dtype(dtype).itemsize, p // k
    inner = np.diff(block_bounds(nbytes // itemsize, k))
    across = np.array([np.diff(block_bounds(int(b), nodes)) for b in inner], dtype=np.int64).reshape(k, nodes)
    s_in, r_in = ring_shifts(k)
    s_x, r_x = ring_shifts(nodes)
    local = _rotating(inner[None, :] * itemsize, s_in, r_in, lambda r: 0 * r, lambda r: r % k)
    cross = _rotating(across * itemsize, s_x, r_x, lambda r: r % k, lambda r: r // k)
    first, middle = k - 1, 2 * (nodes - 1)  # rounds: reduce-scatter inside, allreduce across, allgather inside

    def size_of(t: Any, ranks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        across = (t >= first) & (t < first + middle)
        inside = local(np.where(t < first, t, np.maximum(t - middle, 0)), ranks)
        other = cross(np.clip(t - first, 0, None), ranks)
        return np.where(across, other[0], inside[0]), np.where(across, other[1], inside[1])

    dst = np.array([1 % k] * first + [k % p] * middle + [1 % k] * first, dtype=np.int64)[:, None]
    src = np.array([k - 1] * first + [(nodes - 1) * k] * middle + [k - 1] * first, dtype=np.int64)[:, None]
    (relabel,) = _node_shifts(f"hierarchical_rs:{k}", p)
    return Schedule(p, dst, src, 0 * dst, 0 * dst, relabel, None, size_of)


def matches(schedule: Schedule, traced: dict[int, list[Row]]) -> bool:
    """Whether ``schedule`` gives each traced rank's real rounds (peers, bytes sent, bytes reduced)."""
    for rank, rows in traced.items():
        try:
            real = np.array(_rounds_of(rows, rank), dtype=np.int64).reshape(-1, 6)[:, [0, 3, 2, 5]]
        except NotLockstep:
            return False
        if real.shape != (schedule.rounds, 4) or (real != schedule.of_rank(rank)).any():
            return False
    return True


def _shift(peer: Any, rank: Any, p: int) -> Any:
    return (peer + rank) % p


def _xor(peer: Any, rank: Any, p: int) -> Any:
    return peer ^ rank


def _node_shifts(algorithm: str, p: int) -> list[Callable]:
    """For "hierarchical_rs:K" (nodes of K ranks): the shift of node and local rank together, as rank r = (node,
    local) meets its node's ranks and its local rank's peers on the other nodes as rank 0 = (0, 0) does its own.

    None for "hierarchical:K", the leader schedule: local rank 0 reduces, the others only send (only the nodes
    are alike), and its tree's Send and Recv are no Sendrecv rounds. The event engine replays it."""
    head, _, k = algorithm.partition(":")
    if head != "hierarchical_rs" or not k.isdigit() or p % int(k):
        return []
    K, N = int(k), p // int(k)
    return [lambda peer, rank, p: ((peer // K + rank // K) % N) * K + (peer % K + rank % K) % K]


def _relabelled(rows: list[Row], rank: int, p: int, relabel) -> list[Row]:
    """Rank 0's rows as rank ``rank`` would have them under ``relabel`` (peers mapped, all else kept)."""
    out = []
    for row in rows:
        peer = relabel(row[1], rank, p) if row[1] >= 0 else row[1]
        source = relabel(row[4], rank, p) if row[4] >= 0 else row[4]
        out.append((row[0], peer, row[2], row[3], source, *row[5:]))
    return out


def replay_rounds(schedule: Schedule, fabric: Fabric) -> np.ndarray:
    """Each rank's finish time (shape (p,)) for a lockstep schedule on ``fabric`` (see the recurrence above)."""
    p = schedule.p
    T = np.zeros(p)
    ranks = np.arange(p)
    patterns: dict[bytes, tuple[np.ndarray, np.ndarray]] = {}
    for k in range(schedule.rounds):
        dst, src = schedule.peers(k)
        key = dst.tobytes()
        if key not in patterns:
            patterns[key] = _pattern(fabric, ranks, dst)
        latency, rate = patterns[key]
        sent, reduced = schedule.sizes(k)
        E = np.maximum(T, T[dst]) + latency + sent / rate
        T = np.maximum(E, E[src]) + reduced * fabric.gamma
    return T


def _pattern(fabric: Fabric, ranks: np.ndarray, dst: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Latency and rate of each rank's message when every rank sends to dst[rank] at once."""
    paths = [fabric.path(int(r), int(d)) for r, d in zip(ranks, dst)]
    latency = np.array([path.latency for path in paths])
    caps = np.array([path.rate for path in paths])
    if not fabric.contention:
        return latency, caps
    return latency, max_min_rates(fabric.capacity, [path.links for path in paths], caps, weights_of(fabric, paths))


def formula_time(algorithm: str, p: int, nbytes: float, fabric: Fabric, alpha: float) -> float:
    """The closed form on a topology: cost.py's rounds, each paying its longest route and its most shared link.

    Sum over the rounds of cost.round_peers: alpha + link_latency x (the most links a message of the
    round crosses) + (its bytes) / (the slowest max-min fair rate when the round's messages flow
    together); plus the reductions' gamma. Equal blocks (n / p exactly); no overlap between rounds.
    """
    from collectives.cost import round_peers, terms

    total = terms(algorithm, p, nbytes).reduced * fabric.gamma
    hop = getattr(fabric, "link_latency", 0.0)
    for pairs, count, part in round_peers(algorithm, p):
        src, dst = (np.array(side, dtype=np.int64) for side in zip(*pairs))
        latency, rate = _pattern(fabric, src, dst)
        links = max(fabric.hops(int(a), int(b)) for a, b in pairs)
        total += count * (alpha + hop * links + part * nbytes / rate.min())
    return float(total)
