"""The alpha-beta-gamma cost model of every allreduce here, and its calibration.

Sending a message of n bytes costs alpha + n beta (Hockney); reducing n bytes costs n gamma. An
algorithm's time is the cost along its critical path (Thakur, Rabenseifner & Gropp 2005):

    T = rounds * alpha + sent * beta + reduced * gamma

with p ranks, n bytes, L = ceil(log2 p), p' the largest power of two <= p, d = [p != p']:

    algorithm            rounds           sent (x n)                reduced (x n)
    naive                2 (p - 1)        2 (p - 1)                 p - 1
    tree                 2 L              2 L                       L
    ring                 2 (p - 1)        2 (p - 1) / p             (p - 1) / p
    recursive_doubling   log2 p' + 2d     log2 p' + 2d              log2 p' + d
    rabenseifner         2 log2 p' + 2d   2 (p' - 1) / p' + 2d      (p' - 1) / p' + d

``calibrate(comm)`` measures alpha and beta by exchanges of short and long messages among all ranks
(a ping-pong both ways when p = 2; alpha also counts the algorithms' own Python work per round) and
gamma by a local ``np.add``, and gives every rank the slowest rank's numbers, so that "auto" picks
the same algorithm everywhere. What the model leaves out is a constant per call (argument checks,
allocation, the agreement check: some microseconds), which matters only for the shortest messages.
On a network whose links add a latency each (a fat tree, a torus), ``predict(..., link_latency,
hops)`` adds link_latency times the links on the critical path (``route_links``: per round, the
longest route of that round's messages). The model also says how many messages each rank sends and how many bytes cross the wire in
total; the tests hold the simulator's message record to these numbers.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

ALGORITHMS = ("recursive_doubling", "rabenseifner", "ring", "tree", "naive")

# choose_algorithm takes the first of these among the algorithms predicted fastest (to a relative
# TIE of the fastest, so that rounding cannot decide). Fewer rounds first, except that the ring
# comes before Rabenseifner: at p = 2 the two send exactly the same messages and do the same
# local work (one reduce-scatter step, one allgather step), so the model predicts them equal at
# every size and they measure equal; the ring's path is the plainer one (no fold, no halving
# bookkeeping), and it is what MPICH, NCCL and Horovod use for long messages.
PREFERENCE = ("recursive_doubling", "ring", "rabenseifner", "tree", "naive")
TIE = 1e-9


@dataclass(frozen=True)
class CostParams:
    alpha: float  # seconds per message
    beta: float  # seconds per byte sent
    gamma: float  # seconds per byte reduced

    def as_array(self) -> np.ndarray:
        return np.array([self.alpha, self.beta, self.gamma])


# Measured by calibrate() on the 2-core development machine (MPICH 5 shared memory, mpi4py 4.1, p = 2,
# other work running): alpha 5 us (2.5 us of it the exchange), beta 0.2-0.4 ns/B (3-5 GB/s out of cache),
# gamma 0.06-0.15 ns/B.
DEFAULT = CostParams(alpha=5e-6, beta=3e-10, gamma=7e-11)
_params = DEFAULT


def save_params(params: CostParams, path: str, **about: Any) -> None:
    """Write ``params`` as JSON ({"alpha": s, "beta": s/B, "gamma": s/B, ...}); ``about`` adds fields (p, host, ...)."""
    with open(path, "w") as f:
        json.dump({"alpha": params.alpha, "beta": params.beta, "gamma": params.gamma, **about}, f, indent=2)
        f.write("\n")


def load_params(path: str) -> CostParams:
    """The CostParams saved by ``save_params`` (python -m collectives.calibrate --out PATH).

    Refuses, naming the file and the field, anything but finite non-negative numbers for alpha, beta, gamma.
    """
    with open(path) as f:
        try:
            data = json.load(f)
        except json.JSONDecodeError as e:
            raise ValueError(f"{path}: not a calibration file (JSON): {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: not a calibration file: expected a JSON object with alpha, beta and gamma")
    values = []
    for key in ("alpha", "beta", "gamma"):
        value = data.get(key)
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
            raise ValueError(f"{path}: {key} must be a finite non-negative number (seconds), got {value!r}")
        values.append(float(value))
    return CostParams(*values)


def get_params() -> CostParams:
    return _params


def set_params(params: CostParams) -> None:
    """Use ``params`` for "auto" from now on (call it with the same values on every rank)."""
    global _params
    _params = params


@dataclass(frozen=True)
class Terms:
    """What one allreduce costs along its critical path, in units of alpha, beta and gamma."""

    rounds: int
    sent: float  # bytes
    reduced: float  # bytes


def _log2_pof2(p: int) -> tuple[int, int]:
    """log2 of the largest power of two <= p, and d = 1 if p is not a power of two."""
    k = p.bit_length() - 1
    return k, int(p != 1 << k)


def terms(algorithm: str, p: int, nbytes: float) -> Terms:
    """The alpha, beta and gamma multipliers of ``algorithm`` on p ranks and n bytes (the table above)."""
    n, k, d = nbytes, *_log2_pof2(p)
    L = math.ceil(math.log2(p)) if p > 1 else 0
    if algorithm == "naive":
        return Terms(2 * (p - 1), 2 * (p - 1) * n, (p - 1) * n)
    if algorithm == "tree":
        return Terms(2 * L, 2 * L * n, L * n)
    if algorithm == "ring":
        return Terms(2 * (p - 1), 2 * (p - 1) / p * n, (p - 1) / p * n)
    if algorithm == "recursive_doubling":
        return Terms(k + 2 * d, (k + 2 * d) * n, (k + d) * n)
    if algorithm == "rabenseifner":
        q = 2**k
        return Terms(2 * k + 2 * d, (2 * (q - 1) / q + 2 * d) * n, ((q - 1) / q + d) * n)
    raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")


Hops = Callable[[int, int], int]  # hops(src, dst): the links a message between two ranks crosses


def predict(
    algorithm: str,
    p: int,
    nbytes: float,
    params: CostParams | None = None,
    *,
    link_latency: float = 0.0,
    hops: Hops | None = None,
) -> float:
    """Predicted seconds for one allreduce of ``nbytes`` on ``p`` ranks (the agreement check excluded).

    With ``link_latency`` (seconds per link crossed) the rounds also pay their links:
    link_latency * route_links(algorithm, p, hops), ``hops(src, dst)`` the links between two ranks
    (default 2: host, switch, host; a topology's: Fabric.hops of collectives/virtual_time).
    """
    c = params or _params
    t = terms(algorithm, p, nbytes)
    wire = link_latency * route_links(algorithm, p, hops) if link_latency else 0.0
    return t.rounds * c.alpha + wire + t.sent * c.beta + t.reduced * c.gamma


def round_peers(algorithm: str, p: int) -> list[tuple[list[tuple[int, int]], int, float]]:
    """The rounds along the critical path: [(pairs (src, dst) sent together, rounds alike, part of n each sends)].

    ring: 2 (p - 1) rounds of r -> r + 1, n / p each; recursive doubling: the fold in, r <-> r XOR 2^j
    on the p' ranks left (fold.py's numbering), the fold out, n each; Rabenseifner: the fold, the
    same pairs halving (n 2^j / p') then doubling; tree: the binomial tree's level j (r -> r - 2^j),
    up then down, n each; naive: the root receives from each rank in turn, then sends to each.
    """
    k, d = _log2_pof2(p)
    q, rem = 1 << k, p - (1 << k)
    old = [2 * i + 1 if i < rem else i + rem for i in range(q)]  # fold.py: new rank -> the old rank that plays it
    fold_in = [([(2 * i, 2 * i + 1) for i in range(rem)], 1, 1.0)] if d else []
    fold_out = [([(2 * i + 1, 2 * i) for i in range(rem)], 1, 1.0)] if d else []
    pairs = [[(old[r], old[r ^ (1 << j)]) for r in range(q)] for j in range(k)]
    if algorithm == "ring":
        return [([(r, (r + 1) % p) for r in range(p)], 2 * (p - 1), 1 / p)] if p > 1 else []
    if algorithm == "recursive_doubling":
        return fold_in + [(level, 1, 1.0) for level in pairs] + fold_out
    if algorithm == "rabenseifner":
        halving = [(pairs[j], 1, 2**j / q) for j in reversed(range(k))]
        return fold_in + halving + halving[::-1] + fold_out
    if algorithm == "tree":
        masks = (1 << j for j in range(p.bit_length()))
        levels = [lv for lv in ([(r, r - m) for r in range(p) if r & (2 * m - 1) == m] for m in masks) if lv]
        return [(lv, 1, 1.0) for lv in levels] + [([(b, a) for a, b in lv], 1, 1.0) for lv in levels[::-1]]
    if algorithm == "naive":
        return [([(r, 0)], 1, 1.0) for r in range(1, p)] + [([(0, r)], 1, 1.0) for r in range(1, p)]
    raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")


def route_links(algorithm: str, p: int, hops: Hops | None = None) -> int:
    """Links on the critical path: the sum over rounds of the most links a message of the round crosses.

    Exact when every message of a round crosses as many links (a power of two on a fat tree or a
    torus of powers of two), and for the ring (the rank next to the longest route pays it every round);
    an upper bound otherwise. ``hops(src, dst)``: default 2 for every pair (a crossbar or a switch).
    """
    hops = hops or (lambda src, dst: 2)
    return sum(count * max((hops(a, b) for a, b in pairs), default=0) for pairs, count, _ in round_peers(algorithm, p))


def predict_check(p: int, params: CostParams | None = None, message_bytes: int = 112) -> float:
    """Predicted seconds of the agreement check: a recursive-doubling handshake of 112-byte messages.

    (log2 p' + 2d) (alpha + 112 beta): agreement.handshake without data (the header of a 1-d array,
    88 + 8 bytes, and the 16-byte status word).
    Recursive doubling carries its short data in the handshake and pays no check of its own.
    """
    c = params or _params
    k, d = _log2_pof2(p)
    return (k + 2 * d) * (c.alpha + message_bytes * c.beta)


def messages_per_rank(algorithm: str, p: int) -> list[int]:
    """How many messages each rank sends in one allreduce (whatever the size, 0-byte ones included)."""
    k, d = _log2_pof2(p)
    rem = p - 2**k
    if algorithm == "naive":
        return [p - 1] + [1] * (p - 1)
    if algorithm == "tree":  # one send up (except the root) plus one per child in the binomial tree

        def children(r: int) -> int:
            limit = r & -r if r else p  # children r + 2^j for 2^j below r's lowest set bit
            return sum(1 for j in range(p.bit_length()) if 2**j < limit and r + 2**j < p)

        return [int(r != 0) + children(r) for r in range(p)]
    if algorithm == "ring":
        return [2 * (p - 1)] * p
    steps = {"recursive_doubling": k, "rabenseifner": 2 * k}.get(algorithm)
    if steps is None:
        raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    # folded pairs: the even rank sends once (its data); the odd one also hands the result back
    return [(1 if r % 2 == 0 else steps + 1) if r < 2 * rem else steps for r in range(p)]


def total_bytes(algorithm: str, p: int, nbytes: int) -> int:
    """Bytes sent by all ranks together in one allreduce of ``nbytes`` (exact, whatever the block sizes)."""
    k, d = _log2_pof2(p)
    q, rem = 2**k, p - 2**k
    per_vector = {
        "naive": 2 * (p - 1),  # p - 1 vectors in, p - 1 out
        "tree": 2 * (p - 1),  # every edge of the tree carries the vector up once and down once
        "ring": 2 * (p - 1),  # p (p - 1) blocks in each phase = (p - 1) vectors
        "recursive_doubling": q * k + 2 * rem,  # q ranks x k steps, plus the fold in and out
        "rabenseifner": 2 * (q - 1) + 2 * rem,  # step with distance m moves m vectors in total, each way
    }
    if algorithm not in per_vector:
        raise ValueError(f"unknown algorithm {algorithm!r}: expected one of {', '.join(ALGORITHMS)}")
    return per_vector[algorithm] * nbytes


# -- calibration ------------------------------------------------------------------------------------
def _exchange_time(
    comm: Any, nbytes: int, repeats: int, batch: int = 10, buffers: int = 1, before: Callable[[], None] | None = None
) -> float:
    """Seconds per step of a ring of Sendrecv, every rank sending ``nbytes`` right and receiving from the left.

    With p = 2 this is a ping-pong in both directions at once. Every rank takes part, as in the
    algorithms, so that with more ranks than cores the scheduler's delays are measured too. The
    steps cycle through ``buffers`` pairs of buffers (several, to measure long messages out of cache).
    Median over ``repeats`` batches of ``batch`` steps, ``before()`` (untimed) ahead of each batch.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    send = [np.ones(nbytes, dtype=np.uint8) for _ in range(buffers)]
    recv = [np.ones(nbytes, dtype=np.uint8) for _ in range(buffers)]
    comm.Sendrecv(send[0], right, 0, recv[0], left, 0)  # warm up the connections
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        for i in range(batch):
            comm.Sendrecv(send[i % buffers], right, 0, recv[i % buffers], left, 0)
        times.append((time.perf_counter() - t0) / batch)
    return float(np.median(times))


def _cooled(comm: Any) -> Callable[[], None]:
    """What ``calibrate(cold=True)`` runs before each measurement: a pass over COLD_BYTES, then a barrier."""
    buffer = np.zeros(COLD_BYTES // 4, np.float32)

    def before() -> None:
        np.add(buffer, 1.0, out=buffer)
        comm.Barrier()

    return before


def _reduction_time(nbytes: int, repeats: int) -> float:
    """Seconds per byte of np.add(a, b, out=a) on float32 vectors of ``nbytes``."""
    a, b = np.ones(nbytes // 4, np.float32), np.ones(nbytes // 4, np.float32)
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        np.add(a, b, out=a)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / nbytes


def _round_time(comm: Any, repeats: int, before: Callable[[], None] | None = None) -> float:
    """Seconds per round of a ring allreduce of 8 bytes (2 (p - 1) rounds): a message plus the Python around it.
    Median over ``repeats`` calls, ``before()`` (untimed) ahead of each."""
    from collectives.algorithms.ring import allreduce

    x = np.zeros(2, dtype=np.float32)
    times = []
    for _ in range(repeats):
        if before is not None:
            before()
        t0 = time.perf_counter()
        allreduce(comm, x, np.add)
        times.append(time.perf_counter() - t0)
    return float(np.median(times)) / (2 * (comm.Get_size() - 1))


COLD_BYTES = 64 << 20  # what ``calibrate(cold=True)`` streams through before each measurement: twice a 32 MiB L3


def calibrate(comm: Any, large: int = 1 << 24, repeats: int = 10, apply: bool = True, cold: bool = False) -> CostParams:
    """Measure alpha, beta (exchanges of 8 and ``large`` bytes) and gamma (np.add); every rank gets the same.

    alpha is the time of an 8-byte exchange step or, if larger, of one round of a short ring
    allreduce (the algorithms' own Python work per round counts as latency too); beta is the extra
    time per byte of a ``large`` exchange, gamma the time per byte of np.add on ``large`` bytes:
    past the caches, as the long messages these two matter for are. Every rank measures, and all
    take the slowest rank's numbers (a max-allreduce), so "auto" chooses alike everywhere. A
    collective call: every rank of ``comm`` must call it. With ``apply``, "auto" uses the result.

    Back to back (the default), the exchanges find the previous one's state warm: the buffers and page
    tables in cache, every rank polling. A training step calls its collectives once, after its compute,
    and there they cost more (measured here at p = 2: a ring allreduce of 2.4 MB took 0.56 ms back to back
    and 1.1-1.3 ms after 30 ms of compute or of sleep, even behind a barrier and a first small call).
    ``cold``: every measurement follows a pass over ``COLD_BYTES`` on every rank and a barrier, as a step's
    exchange follows its backward; the constants are then those of such a call (docs/simulator-validation.md).
    """
    from collectives.algorithms.tree import allreduce

    values = DEFAULT.as_array()
    if comm.Get_size() >= 2:
        if cold:  # a round of a step's ring, after compute (a lone exchange after the barrier would also
            before = _cooled(comm)  # measure how far apart the ranks leave it: with more ranks than cores, ms)
            alpha = values[0] = _round_time(comm, repeats * 10, before)
            large_s = _exchange_time(comm, large, repeats, batch=1, buffers=3, before=before)
        else:
            alpha = _exchange_time(comm, 8, repeats * 10)
            values[0] = max(alpha, _round_time(comm, repeats * 10))
            large_s = _exchange_time(comm, large, repeats, batch=3, buffers=3)
        values[1] = max(large_s - alpha, 0.0) / large
    values[2] = _reduction_time(large, repeats)
    params = CostParams(*map(float, allreduce(comm, values, np.maximum)))
    if apply:
        set_params(params)
    return params
