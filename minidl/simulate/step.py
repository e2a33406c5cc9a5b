"""One data-parallel training step on P nodes, in virtual time, and the scaling table it gives.

With the profile's forward F, backward B, update U, and bucket k's allreduce costing c_k (its pack + unpack
here plus ``allreduce_time`` of its bytes on p = nodes x ranks_per_node ranks):

- without overlap (what ``DistributedOptimizer.synchronize`` does: the step agreement, then the buckets one
  after another once the backward is done)

      step = F + B + agree + sum_k c_k + U + stop

- with ``overlap`` (Horovod's and PyTorch DDP's way: a bucket is allreduced as soon as its gradients are
  ready, r_k after the backward starts, in the order they become ready, one at a time)

      start_k = max(F + r_k, end_{k-1}),   end_k = start_k + c_k,   step = max(end_last, F + B) + U + stop

  (the step agreement runs on the communication thread before bucket 0: it is part of c_0)

  assuming the communication progresses without slowing the backward (a spare core or an offloading NIC).

The two synchronisations every step of ``python -m minidl.train --parallel data`` makes besides the buckets
(``STEP_SYNCS``): ``agree``, the step agreement (``lockstep.agree_on_step``: a handshake of one header, the
recursive doubling of collectives/agreement.py), which is also where a rank waits for the slowest; and
``stop``, the trainer's "did any rank get a Ctrl-C?" (``interrupt.Watch.agreed``: a checked ring allreduce of
8 bytes). Each is a few latencies: nothing on a cluster's network, but where ranks outnumber the cores every
round of them waits for a rank to be scheduled (node.py).

The exposed communication is step - (F + B + U): what the compute did not hide. Every rank does the same
work on its own batch, so the slowest rank is any rank (``allreduce_time`` is the slowest rank's time).
Weak scaling: the batch per rank is fixed, P nodes train P times the items per step.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from collectives.cost import CostParams, get_params
from collectives.virtual_time.network import get_network
from minidl.simulate.network import allreduce_time, collective_time
from minidl.simulate.node import NodeSpec
from minidl.simulate.profile import BucketProfile, Profile
from minidl.simulate.schemes import Scheme, scheme_step, slowest

# (call, bytes per rank); a handshake's messages are a header (agreement.header_bytes: 88 bytes, 8 more for an
# array's one dimension) and a 16-byte status word. tests/test_simulate.py holds them to a real step's messages.
STEP_SYNCS = {
    "agree": (("recursive_doubling", 104),),  # lockstep.agree_on_step: a handshake without data
    "stop": (("recursive_doubling", 112), ("ring", 8)),  # interrupt.Watch.agreed: a checked ring sum of one float64
}


@dataclass(frozen=True)
class StepTime:
    """A simulated step: ``compute_s`` = F + B + U, ``comm_s`` exposed, ``step_s`` their sum, the allreduces'."""

    compute_s: float
    comm_s: float
    allreduce_s: float  # sum of the buckets' communication, hidden or not (barrier included)
    windows: tuple[tuple[float, float], ...]  # each bucket's (start, end) in the step, in profile order

    @property
    def step_s(self) -> float:
        return self.compute_s + self.comm_s


def step_time(
    profile: Profile, bucket_s: Sequence[float], overlap: bool = False, barrier_s: float = 0.0, after_s: float = 0.0
) -> StepTime:
    """The step algebra above, for given per-bucket communication times ``bucket_s`` (in profile order), the
    step agreement ``barrier_s`` (before the buckets; with overlap, give it as part of the first bucket's) and
    ``after_s``, synchronisation after the update (the trainer's stop agreement)."""
    if len(bucket_s) != len(profile.buckets):
        raise ValueError(f"{len(bucket_s)} bucket times for a profile of {len(profile.buckets)} buckets")
    F, B, U = profile.forward_s, profile.backward_s, profile.update_s
    windows: list[tuple[float, float]] = [(0.0, 0.0)] * len(bucket_s)
    if overlap:
        end = F
        for k in sorted(range(len(bucket_s)), key=lambda k: profile.buckets[k].ready_s):
            start = max(F + profile.buckets[k].ready_s, end)
            end = start + bucket_s[k]
            windows[k] = (start, end)
        exposed = max(end - (F + B), 0.0) + after_s
        total = float(sum(bucket_s)) + after_s
    else:
        end = F + B + barrier_s
        for k, c in enumerate(bucket_s):
            windows[k] = (end, end + c)
            end += c
        exposed = end - (F + B) + after_s
        total = exposed
    return StepTime(F + B + U, exposed, total, tuple(windows))


@dataclass(frozen=True)
class Cluster:
    """P nodes on a network: a preset name ("10gbe", "ib-edr", ...) or "crossbar" with ``params``."""

    nodes: int
    network: Any = "crossbar"
    node: NodeSpec = NodeSpec()
    params: CostParams | None = None
    options: tuple[tuple[str, Any], ...] = ()  # the network's: topology, oversubscription, leaf_size, dims

    @property
    def ranks(self) -> int:
        return self.nodes * self.node.ranks_per_node

    def allreduce_s(self, algorithm: str, nbytes: float) -> float:
        rpn = self.node.ranks_per_node
        return allreduce_time(
            algorithm, self.ranks, nbytes, self.network, self.params, ranks_per_node=rpn, **dict(self.options)
        )

    def call_s(self, call: str, nbytes: float) -> float:
        """Any traced collective ("allgather:ring", "broadcast", ...) of ``nbytes`` per rank on this cluster."""
        rpn = self.node.ranks_per_node
        return collective_time(
            call, self.ranks, nbytes, self.network, self.params, ranks_per_node=rpn, **dict(self.options)
        )

    def link(self) -> CostParams:
        """alpha and beta between two nodes (the network's link) and gamma."""
        options = {k: v for k, v in self.options if k != "dims"}  # a torus's sides concern its routes only
        return get_network(self.network, self.params, **options).params

    def exchange_s(self, algorithm: str, bucket: BucketProfile) -> float:
        """A bucket's exchange: the allreduce of its bytes, or for a rows bucket sparse_rows.exchange_rows.

        Rows (each of p ranks with k non-zero rows of ``row_bytes``, K = p k, a table of V rows): an allgather of
        the counts (16 bytes, with its agreement check: a recursive-doubling exchange of ~112 bytes), then ring
        allgathers of the K row ids (8 k bytes a rank) and of the rows (k row_bytes a rank), and K rows added
        (K row_bytes gamma); when K > V / 2 every rank falls back to the dense allreduce of the table instead.
        """
        if not bucket.rows or self.ranks == 1:
            return self.allreduce_s(algorithm, bucket.nbytes)
        p, k = self.ranks, bucket.rows
        counts = self.call_s("allgather:ring", 16) + self.allreduce_s("recursive_doubling", 112)
        if p * k > bucket.nbytes / bucket.row_bytes / 2:
            return counts + self.allreduce_s(algorithm, bucket.nbytes)
        gamma = (self.params or get_params()).gamma
        return (
            counts
            + self.call_s("allgather:ring", 8 * k)
            + self.call_s("allgather:ring", k * bucket.row_bytes)
            + (p * k * bucket.row_bytes * gamma)
        )


def simulate_step(
    profile: Profile, cluster: Cluster, algorithm: str = "ring", overlap: bool = False, scheme: Scheme | None = None
) -> StepTime:
    """One step of ``profile`` (already scaled to the node) on ``cluster`` (see the module doc).

    ``scheme`` (schemes.py): another parallel scheme, or data parallelism whose ranks vary (every rank waits for
    the slowest: the step of a rank computing E[max_r f_r] times as long); its algorithm and overlap win.
    """
    if scheme is not None and scheme.parallel != "data":
        compute, comm = scheme_step(profile, cluster, scheme)
        return StepTime(compute, comm, comm, ())
    if scheme is not None:
        profile = slowest(profile, scheme.variation.wait(cluster.ranks))
        algorithm, overlap = scheme.algorithm, scheme.overlap
    if cluster.ranks == 1:
        return step_time(profile, [0.0] * len(profile.buckets), overlap)
    bucket_s = [b.pack_s + cluster.exchange_s(algorithm, b) for b in profile.buckets]
    agree, stop = (sum(cluster.allreduce_s(a, n) for a, n in STEP_SYNCS[k]) for k in ("agree", "stop"))
    if overlap and bucket_s:  # the step agreement goes first on the communication thread
        bucket_s[0] += agree
    return step_time(profile, bucket_s, overlap, 0.0 if overlap else agree, stop)


@dataclass(frozen=True)
class Row:
    """One line of the scaling table (the ``--json`` keys first)."""

    nodes: int
    rate: float  # items/s of the whole cluster
    per_node_rate: float
    speedup: float  # rate / rate of one node
    efficiency: float  # speedup / nodes
    step_s: float
    compute_s: float
    comm_s: float
    ranks: int
    algorithm: str
    network: str
    overlap: bool

    def as_dict(self) -> dict[str, Any]:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}


def scaling(
    profile: Profile,
    nodes: Sequence[int],
    algorithm: str = "ring",
    network: Any = "crossbar",
    node: NodeSpec | None = None,
    overlap: bool = False,
    params: CostParams | None = None,
    options: dict[str, Any] | None = None,
    scheme: Scheme | None = None,
) -> list[Row]:
    """The scaling table of ``profile`` (as measured; ``node`` scales it) on each node count; ``options`` go to
    the network (topology, oversubscription, leaf_size, dims). Weak scaling (the batch per rank fixed), or with a
    ``scheme`` that splits one batch (pipeline, tensor: schemes.py) strong scaling."""
    node = node or NodeSpec()
    scaled = node.apply(profile)
    weak = scheme is None or scheme.weak

    def rate(n: int) -> tuple[float, StepTime]:
        cluster = Cluster(n, network, node, params, tuple(sorted((options or {}).items())))
        t = simulate_step(scaled, cluster, algorithm, overlap, scheme)
        return (cluster.ranks if weak else 1) * scaled.items / t.step_s, t

    one, _ = rate(1)
    name = network if isinstance(network, str) else type(network).__name__
    label = algorithm if scheme is None else scheme.label
    rows = []
    for n in nodes:
        r, t = rate(n)
        rows.append(
            Row(n, r, r / n, r / one, r / one / n, t.step_s, t.compute_s, t.comm_s, n * node.ranks_per_node, label,
                name, overlap if scheme is None else scheme.overlap)
        )  # fmt: skip
    return rows
