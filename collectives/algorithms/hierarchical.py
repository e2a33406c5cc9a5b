"""Node-aware (hierarchical) allreduce: reduce inside each node, allreduce across the nodes, spread inside again.

On a cluster the links inside a node (shared memory) are much faster than those between nodes. A flat ring over
all p = N x k ranks (N nodes of k ranks) sends 2 (p - 1) messages per rank, most of them across the network.
A node-aware schedule keeps most messages inside the nodes. Two of them are here: the textbook one, through
each node's leader (MPICH's SMP-aware allreduce: a reduce inside the node, an allreduce among the nodes' leaders,
a broadcast inside), and the one by blocks that Horovod's hierarchical allreduce runs (a reduce-scatter inside
the node, an allreduce across, an allgather inside).

``schedule="leader"`` (the name "hierarchical" in the trainer, the simulator and the tracer):

1. inside each node, a binomial-tree reduce (tree.py) to the node's leader, its local rank 0;
2. across nodes, the N leaders allreduce the whole vector (ring by default; ``algorithm``); the other ranks wait;
3. inside each node, a binomial-tree broadcast from the leader.

``schedule="rs"`` (the name "hierarchical_rs"):

1. inside each node, a ring reduce-scatter (ring.py): local rank j ends with block j (n / k values) of the node's sum;
2. across nodes, the N ranks with the same local rank j allreduce block j (N of them, one per node);
3. inside each node, a ring allgather of the k blocks.

Cost for n bytes (alpha latency, beta seconds per byte, gamma seconds per reduced byte; "in" inside a node,
"x" across nodes; L = ceil(log2 k)), with a ring across the nodes:

    leader  T = 2 L (alpha_in + n beta_in) + L n gamma                               (steps 1 and 3: the tree)
              + 2 (N - 1) (alpha_x + n/N beta_x) + (N - 1) n/N gamma                 (step 2: ring on n)
    rs      T = 2 (k - 1) (alpha_in + n/k beta_in) + (k - 1) n/k gamma               (steps 1 and 3: the ring)
              + 2 (N - 1) (alpha_x + n/(N k) beta_x) + (N - 1) n/(N k) gamma         (step 2: ring on n/k)

(``predict``: cost.predict's tree or ring on k ranks plus step 2's algorithm on N ranks), against the flat
ring's 2 (p - 1) (alpha + n/p beta), every alpha and beta those of the slowest link on the ring. Both pay
2 (N - 1) network latencies instead of about 2 (p - 1): the win grows with k when latency dominates (small
buckets, many ranks per node). Which of the two wins:

- leader: fewer, larger network messages (one rank per node sends 2 (N - 1) of n/N bytes), and only 1 of
  the k ranks of a node uses the network while the others wait; inside the node 2 L latencies, not 2 (k - 1).
  It wins on short vectors, where latency is the cost.
- rs: every local rank uses the network, each with n/k bytes, so step 2 moves k times fewer bytes per rank and
  the k ranks' links (or NIC rails) all work; inside, each rank moves 2 (k - 1)/k n instead of 2 L n and
  reduces (k - 1)/k n instead of L n. It wins on long vectors.

For example (``collectives.allreduce_time`` on 10GbE, one switch, 64 ranks in nodes of 8): 198 us for the leader
against 238 us for the rs at 64 bytes, 256 against 272 us at 16 KiB, then 431 against 374 us at 64 KiB and
3.9 against 2.4 ms at 1 MiB.

Nodes: ``comm.Split_type(MPI.COMM_TYPE_SHARED)`` (the ranks sharing memory), or, with ``ranks_per_node=k``, ranks
r // k grouped together (to emulate nodes on one machine, for tests, and for the virtual-time cluster). Every node
must hold the same number of ranks (the leaders' and the blocks' communicators must line up): anything else is an
error on every rank. With ``ranks_per_node`` the two sub-communicators are ``GroupComm`` views of one Dup of
``comm`` whose members each rank works out alone, with no message: that is what lets
``collectives.allreduce_time("hierarchical", ...)`` trace the schedule one rank at a time (a rank traced alone
cannot learn the others' colours in a Split). The rs blocks are np.array_split's (n = 10, k = 4: 3, 3, 2, 2): the
ranks of step 2 all hold block j, of one size. One agreement check over all the ranks comes first (with
``check``); the steps run unchecked, so the traced schedule holds at most one check. Every rank ends with the
same bits: step 2 gives them to every rank of a cross communicator, steps 3 copy them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectives import cost, dispatch
from collectives.agreement import agree
from collectives.algorithms import ring, tree
from collectives.auto import auto_algorithm
from collectives.common import Op, block_bounds
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


SCHEDULES = ("leader", "rs")
NAMES = {"hierarchical": "leader", "hierarchical_rs": "rs"}  # the names the trainer, the simulator, the tracer use


def predict(
    p: int, ranks_per_node: int, nbytes: float, inside: Any, across: Any, schedule: str = "leader", algorithm="ring"
) -> float:
    """Seconds of the three steps (the module doc's T), for blocks that divide evenly and nodes of 2^j ranks.

    ``inside`` and ``across``: cost.CostParams of the links within a node and between nodes (gamma from
    ``inside``); ``algorithm``: step 2's, on the N = p / k nodes.
    """
    k, n = ranks_per_node, nbytes
    x = cost.CostParams(across.alpha, across.beta, inside.gamma)
    if schedule == "leader":
        return cost.predict("tree", k, n, inside) + cost.predict(algorithm, p // k, n, x)
    if schedule == "rs":
        return cost.predict("ring", k, n, inside) + cost.predict(algorithm, p // k, n / k, x)
    raise ValueError(f"hierarchical: unknown schedule {schedule!r}: expected one of {SCHEDULES}")


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
    sizes = dispatch.allreduce(comm, np.array([local.Get_size(), -local.Get_size()], np.int64), op="max")
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
    schedule: str = "leader",
) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x`` (a new array, the same bits on every rank), by the three steps
    of the module doc's ``schedule`` ("leader" or "rs"); ``algorithm`` is step 2's allreduce across nodes.

    ``nodes``: the (local, cross) communicators of ``node_comms`` made once and kept (the data-parallel optimizer
    does), else made for this call. ``check``: one agreement check over ``comm`` first (shape, dtype, op, the
    schedule and the algorithm, as every collective here), none inside the three steps.
    """
    local, cross = nodes or node_comms(comm, ranks_per_node)
    try:
        call = f"hierarchical-{schedule}-{algorithm}.allreduce"
        flat, f = agree(comm, x, op, call, check=check)  # one check for all steps
        run = _schedule(schedule, algorithm)  # after the check: a name one rank alone got wrong is a MismatchError
        return run(local, cross, flat, f, algorithm).reshape(np.shape(x))
    finally:
        if nodes is None:
            free(local, cross)


def allreduce(
    comm: Any, x: np.ndarray, f: Op = np.add, ranks_per_node: int | None = None, algorithm="ring", schedule="leader"
) -> np.ndarray:
    """f over every rank's flat ``x``, a new flat array on every rank: the bare schedule (ring.py's signature, no
    agreement check), on nodes made for this call."""
    run = _schedule(schedule, algorithm)
    local, cross = node_comms(comm, ranks_per_node)
    try:
        return run(local, cross, x, f, algorithm)
    finally:
        free(local, cross)


def free(local: Any, cross: Any) -> None:
    """Free what ``node_comms`` made (the views' one Dup, or the two Split communicators)."""
    made = [local.comm] if isinstance(local, GroupComm) else [local, cross]  # the views share one Dup
    for c in made:
        c.Free()


def _schedule(schedule: str, algorithm: str) -> Any:
    """The schedule's function, after checking its name and step 2's algorithm (before any message)."""
    if schedule not in SCHEDULES:
        raise ValueError(f"hierarchical allreduce: unknown schedule {schedule!r}: expected one of {SCHEDULES}")
    if algorithm != "auto" and algorithm not in dispatch.PAGES:
        raise ValueError(
            f"hierarchical allreduce: unknown algorithm {algorithm!r}: expected auto or one of {list(dispatch.PAGES)}"
        )
    return leader_schedule if schedule == "leader" else rs_schedule


def leader_schedule(local: Any, cross: Any, flat: np.ndarray, f: Op, algorithm: str = "ring") -> np.ndarray:
    """The leader schedule on a flat array: tree reduce to local rank 0, allreduce among leaders, tree broadcast."""
    inside = wire(local, flat.dtype)
    acc = np.empty_like(flat)
    tree.reduce_into(inside, flat, acc, f, root=0)  # step 1: the node's sum on its leader
    if local.Get_rank() == 0:
        acc = _across(cross, acc, f, algorithm)  # step 2: the leaders only (my cross communicator is theirs)
    tree.broadcast_into(inside, acc, root=0)  # step 3
    return acc


def rs_schedule(local: Any, cross: Any, flat: np.ndarray, f: Op, algorithm: str = "ring") -> np.ndarray:
    """The rs schedule on a flat array: ring reduce-scatter inside, block j across the nodes, ring allgather."""
    k, j = local.Get_size(), local.Get_rank()
    b = block_bounds(flat.size, k)  # block j: the same size on every rank of my cross communicator
    acc = np.empty_like(flat)
    ring.reduce_scatter_into(wire(local, acc.dtype), flat, acc, f, b)  # step 1: block j on local rank j
    acc[b[j] : b[j + 1]] = _across(cross, acc[b[j] : b[j + 1]], f, algorithm)  # step 2
    ring.allgather_into(wire(local, acc.dtype), acc, b)  # step 3
    return acc


def _across(cross: Any, x: np.ndarray, f: Op, algorithm: str) -> np.ndarray:
    """Step 2: ``algorithm``'s page (or auto's pick) over the cross communicator, unchecked; x itself on one node."""
    if cross.Get_size() == 1:
        return x
    name = auto_algorithm(cross.Get_size(), x.nbytes) if algorithm == "auto" else algorithm
    return dispatch.PAGES[name].allreduce(wire(cross, x.dtype), x, f)
