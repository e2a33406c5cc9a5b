"""Node-aware (hierarchical) allreduce: reduce-scatter inside each node, allreduce across nodes, allgather inside.

On a cluster the links inside a node (shared memory) are much faster than those between nodes. A flat ring over
all p = N x k ranks (N nodes of k ranks) sends 2 (p - 1) messages per rank, most of them across the network.
The hierarchical schedule (as NCCL's and Horovod's hierarchical allreduce, and the SMP-aware algorithms of
Thakur et al., "Optimization of collective communication operations in MPICH", 2005):

1. inside each node, a ring reduce-scatter: local rank j ends with block j (n / k values) of its node's sum;
2. across nodes, the N ranks with the same local rank j allreduce block j (N of them, one per node);
3. inside each node, a ring allgather of the k blocks: every rank holds the whole sum.

Cost for n bytes (alpha latency, beta seconds per byte, gamma seconds per reduced byte; "in" inside a node,
"x" across nodes), with a ring at each level:

    T = 2 (k - 1) (alpha_in + n/k beta_in) + (k - 1) n/k gamma                        (steps 1 and 3)
      + 2 (N - 1) (alpha_x + n/(N k) beta_x) + (N - 1) n/(N k) gamma                  (step 2: ring on n/k)

against the flat ring's 2 (p - 1) (alpha + n/p beta) with every alpha and beta those of the slowest link on the
ring. Each rank sends 2 (N - 1)/N x n/k bytes across the network and pays 2 (N - 1) network latencies instead of
about 2 (p - 1): the win grows with k when latency dominates (small buckets, many ranks per node).

Nodes: ``comm.Split_type(MPI.COMM_TYPE_SHARED)`` (the ranks sharing memory), or, with ``ranks_per_node=k``, ranks
r // k grouped together (to emulate nodes on one machine, for tests, and for the virtual-time cluster). Every node
must hold the same number of ranks (the blocks of step 2 must line up): anything else is an error on every rank.
With ``ranks_per_node`` the two sub-communicators are ``GroupComm`` views of one Dup of ``comm`` whose members each
rank works out alone, with no message: that is what lets ``collectives.allreduce_time("hierarchical", ...)`` trace
the schedule one rank at a time (a rank traced alone cannot learn the others' colours in a Split).
The blocks are np.array_split's (n = 10, k = 4: 3, 3, 2, 2): the ranks of step 2 all hold block j, of one size.
One agreement check over all the ranks comes first (with ``check``); the steps run unchecked, so the traced
schedule holds at most one check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectives.agreement import agree
from collectives.algorithms import ring
from collectives.common import block_bounds
from collectives.dispatch import allreduce
from collectives.loc import wire


class GroupComm:
    """Ranks ``members`` of ``comm`` as a communicator of their own (rank i here is ``comm``'s rank members[i]).

    The point-to-point subset only; messages go through ``comm`` with the peers translated (a receive's Status,
    if asked for, names ``comm``'s rank). Build it on a Dup of the parent so that its messages never match the
    parent's. Any communicator with the subset will do: MPI's, the in-process one, the tracer's.
    """

    def __init__(self, comm: Any, members: Sequence[int]):
        self.comm, self.members = comm, tuple(int(m) for m in members)
        self._rank = self.members.index(comm.Get_rank())

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return len(self.members)

    def _peer(self, rank: int) -> int:
        return self.members[rank] if rank >= 0 else rank  # ANY_SOURCE stays itself

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.comm.Send(buf, self._peer(dest), tag)

    def Recv(self, buf: Any, source: int = -2, tag: int = -1, status: Any = None) -> None:
        self.comm.Recv(buf, self._peer(source), tag, status)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Any:
        return self.comm.Isend(buf, self._peer(dest), tag)

    def Irecv(self, buf: Any, source: int = -2, tag: int = -1) -> Any:
        return self.comm.Irecv(buf, self._peer(source), tag)

    def Sendrecv(
        self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = -2, recvtag: int = -1
    ) -> None:
        self.comm.Sendrecv(sendbuf, self._peer(dest), sendtag, recvbuf, self._peer(source), recvtag)


def predict(p: int, ranks_per_node: int, nbytes: float, inside: Any, across: Any) -> float:
    """Seconds of the three steps with a ring at each level (the module doc's T), for blocks that divide evenly.

    ``inside`` and ``across``: cost.CostParams of the links within a node and between nodes (gamma from ``inside``).
    """
    k, n = ranks_per_node, nbytes
    N = p // k
    within = 2 * (k - 1) * (inside.alpha + n / k * inside.beta) + (k - 1) * n / k * inside.gamma
    between = 2 * (N - 1) * (across.alpha + n / (N * k) * across.beta) + (N - 1) * n / (N * k) * inside.gamma
    return within + between


def node_comms(comm: Any, ranks_per_node: int | None = None) -> tuple[Any, Any]:
    """(the ranks of my node, the ranks of every node with my local rank). Collective over ``comm``."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if ranks_per_node is not None:
        k = ranks_per_node
        if int(k) != k or not 1 <= k <= p or p % k:
            raise ValueError(f"hierarchical allreduce: ranks_per_node={k} must divide the {p} ranks")
        k, node, j = int(k), rank // int(k), rank % int(k)
        dup = comm.Dup()  # the two views share one context: no pair of ranks is in both
        return GroupComm(dup, range(node * k, node * k + k)), GroupComm(dup, range(j, p, k))
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    sizes = allreduce(comm, np.array([local.Get_size(), -local.Get_size()], np.int64), op="max")
    if sizes[0] != -sizes[1]:
        raise ValueError(
            f"hierarchical allreduce: nodes hold {-sizes[1]} to {sizes[0]} ranks; every node must hold the same number"
        )
    return local, comm.Split(local.Get_rank(), rank)


def hierarchical_allreduce(
    comm: Any,
    x: Any,
    op: str = "sum",
    ranks_per_node: int | None = None,
    algorithm: str = "ring",
    check: bool = True,
    nodes: tuple[Any, Any] | None = None,
) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x`` (a new array, the same bits on every rank), by the three steps
    of the module doc; ``algorithm`` is step 2's allreduce across nodes.

    ``nodes``: the (local, cross) communicators of ``node_comms`` made once and kept (the data-parallel optimizer
    does), else made for this call. ``check``: one agreement check over ``comm`` first (shape, dtype, op and the
    algorithm, as every collective here), none inside the three steps.
    """
    local, cross = nodes or node_comms(comm, ranks_per_node)
    try:
        return _three_steps(comm, local, cross, x, op, algorithm, check)
    finally:
        if nodes is None:
            free(local, cross)


def free(local: Any, cross: Any) -> None:
    """Free what ``node_comms`` made (the views' one Dup, or the two Split communicators)."""
    made = [local.comm] if isinstance(local, GroupComm) else [local, cross]  # the views share one Dup
    for c in made:
        c.Free()


def _three_steps(comm: Any, local: Any, cross: Any, x: Any, op: Any, algorithm: str, check: bool) -> np.ndarray:
    shape = np.shape(x)
    flat, f = agree(comm, x, op, f"hierarchical-{algorithm}.allreduce", check=check)  # one check for all steps
    k, j = local.Get_size(), local.Get_rank()
    b = block_bounds(flat.size, k)  # block j: the same size on every rank of my cross communicator
    acc = np.empty_like(flat)
    ring.reduce_scatter_into(wire(local, acc.dtype), flat, acc, f, b)  # step 1: block j on local rank j
    acc[b[j] : b[j + 1]] = allreduce(cross, acc[b[j] : b[j + 1]], op, algorithm, check=False)  # step 2
    ring.allgather_into(wire(local, acc.dtype), acc, b)  # step 3
    return acc.reshape(shape)
