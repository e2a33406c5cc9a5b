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

Nodes and their two communicators (collectives/nodes.py: ``node_comms``, ``GroupComm``): ranks sharing memory,
or ranks r // k for ``ranks_per_node=k``; every node must hold the same number of ranks (the leaders' and the
blocks' communicators must line up). The schedules here take the two communicators and step 2's allreduce
(``across``) and run on point-to-point calls only; ``collectives.nodes.hierarchical_allreduce`` puts one agreement
check over all the ranks in front (the steps run unchecked, so the traced schedule holds at most one check). The
rs blocks are np.array_split's (n = 10, k = 4: 3, 3, 2, 2): the ranks of step 2 all hold block j, of one size.
Every rank ends with the same bits: step 2 gives them to every rank of a cross communicator, steps 3 copy them.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any

import numpy as np

from collectives import cost
from collectives.algorithms import ring, tree
from collectives.common import Op, block_bounds
from collectives.wire_format import wire

Across = Callable[[Any, np.ndarray, Op], np.ndarray]  # step 2: (cross communicator, block, f) -> the block's f

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


def leader_schedule(local: Any, cross: Any, flat: np.ndarray, f: Op, across: Across) -> np.ndarray:
    """The leader schedule on a flat array: tree reduce to local rank 0, allreduce among leaders, tree broadcast.

    ``across(cross, x, f)``: step 2's allreduce over the cross communicator (x itself on one node)."""
    inside = wire(local, flat.dtype)
    acc = np.empty_like(flat)
    tree.reduce_into(inside, flat, acc, f, root=0)  # step 1: the node's sum on its leader
    if local.Get_rank() == 0:
        acc = across(cross, acc, f)  # step 2: the leaders only (my cross communicator is theirs)
    tree.broadcast_into(inside, acc, root=0)  # step 3
    return acc


def rs_schedule(local: Any, cross: Any, flat: np.ndarray, f: Op, across: Across) -> np.ndarray:
    """The rs schedule on a flat array: ring reduce-scatter inside, block j across the nodes, ring allgather."""
    k, j = local.Get_size(), local.Get_rank()
    b = block_bounds(flat.size, k)  # block j: the same size on every rank of my cross communicator
    acc = np.empty_like(flat)
    ring.reduce_scatter_into(wire(local, acc.dtype), flat, acc, f, b)  # step 1: block j on local rank j
    acc[b[j] : b[j + 1]] = across(cross, acc[b[j] : b[j + 1]], f)  # step 2
    ring.allgather_into(wire(local, acc.dtype), acc, b)  # step 3
    return acc


MOVED = ("GroupComm", "node_comms", "hierarchical_allreduce", "allreduce", "free")


def __getattr__(name: str) -> Any:
    """The communicators and the checked entry point live in collectives/nodes.py; importable from here too."""
    if name in MOVED:
        return getattr(importlib.import_module("collectives.nodes"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
