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
r // k grouped together (for tests, and for the simulated communicator, which has no shared memory). Every node
must hold the same number of ranks (the blocks of step 2 must line up): anything else is an error on every rank.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.dispatch import allgather, allreduce, reduce_scatter


def node_comms(comm: Any, ranks_per_node: int | None = None) -> tuple[Any, Any]:
    """(the ranks of my node, the ranks of every node with my local rank). Collective over ``comm``."""
    rank, p = comm.Get_rank(), comm.Get_size()
    if ranks_per_node is None:
        from mpi4py import MPI

        local = comm.Split_type(MPI.COMM_TYPE_SHARED, key=rank)
    else:
        if int(ranks_per_node) != ranks_per_node or not 1 <= ranks_per_node <= p or p % ranks_per_node:
            raise ValueError(f"hierarchical allreduce: ranks_per_node={ranks_per_node} must divide the {p} ranks")
        local = comm.Split(rank // int(ranks_per_node), rank)
    sizes = allreduce(comm, np.array([local.Get_size(), -local.Get_size()], np.int64), op="max")
    if sizes[0] != -sizes[1]:
        raise ValueError(
            f"hierarchical allreduce: nodes hold {-sizes[1]} to {sizes[0]} ranks; every node must hold the same number"
        )
    return local, comm.Split(local.Get_rank(), rank)


def hierarchical_allreduce(
    comm: Any, x: Any, op: str = "sum", ranks_per_node: int | None = None, algorithm: str = "ring"
) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x`` (a new array, the same bits on every rank), by the three steps
    of the module doc; ``algorithm`` is step 2's allreduce across nodes."""
    x = np.asarray(x)
    local, cross = node_comms(comm, ranks_per_node)
    k, n = local.Get_size(), x.size
    block = reduce_scatter(local, x.reshape(-1), op)  # np.array_split's blocks: sizes known from n and k
    block = allreduce(cross, block, op, algorithm)
    sizes = [len(b) for b in np.array_split(np.empty(n, np.int8), k)]
    padded = np.zeros(max(sizes), x.dtype)
    padded[: block.size] = block
    stacked = allgather(local, padded)  # k equal-length rows, each block padded to the largest
    return np.concatenate([stacked[j, : sizes[j]] for j in range(k)]).reshape(x.shape)
