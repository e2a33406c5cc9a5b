"""One entry point for every allreduce a data-parallel step can use.

``algorithm`` names a hand-written algorithm from ``collectives`` (naive, tree, ring,
recursive_doubling, rabenseifner, or auto, which picks one from the cost model), ``"hierarchical"``
(collectives/algorithms/hierarchical.py: a tree reduce to each node's leader, a ring allreduce among the
leaders, a tree broadcast inside), ``"hierarchical_rs"`` (the same page's other schedule: ring reduce-scatter
inside, each block across the nodes, ring allgather inside) or ``"mpi"``, the MPI library's own ``Allreduce``,
the yardstick the others are measured against.

The hierarchical allreduces' nodes are the ranks sharing memory (MPI's ``Split_type``), or, with the
environment variable MINIDL_RANKS_PER_NODE=K, K consecutive ranks (nodes emulated on one machine, and the
only way on the in-process communicator, which has no shared memory). Its node communicators are made once
per communicator and kept.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALGORITHMS = (
    "ring",
    "tree",
    "naive",
    "recursive_doubling",
    "rabenseifner",
    "auto",
    "mpi",
    "hierarchical",
    "hierarchical_rs",  # appended: local_sgd.py and gradient_exchange.py agree on an algorithm by its index here
)
RANKS_PER_NODE = "MINIDL_RANKS_PER_NODE"
_NODES: dict[tuple[int, str], tuple[Any, tuple[Any, Any]]] = {}  # (id(comm), K) -> (comm, its node comms)


def check_algorithm(algorithm: str) -> str:
    if algorithm not in ALGORITHMS:
        raise ValueError(f"allreduce algorithm must be one of {ALGORITHMS}, got {algorithm!r}")
    return algorithm


def allreduce(comm: Any, x: np.ndarray, algorithm: str = "ring", op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of ``x`` over all ranks of ``comm``, as a new array on every rank.

    ``check``: first make sure every rank passes the same shape, dtype and op (one small extra
    message round; a clear error instead of a hang or a wrong sum). Skip it only for a layout already
    checked, as the DistributedOptimizer does after its first step.
    """
    check_algorithm(algorithm)
    if algorithm == "mpi":
        return _mpi_allreduce(comm, x, op, check)
    if algorithm in ("hierarchical", "hierarchical_rs"):
        from collectives.nodes import NAMES, hierarchical_allreduce

        return hierarchical_allreduce(comm, x, op, check=check, nodes=node_comms(comm), schedule=NAMES[algorithm])
    import collectives

    return collectives.allreduce(comm, x, op=op, algorithm=algorithm, check=check)


def node_comms(comm: Any) -> tuple[Any, Any]:
    """(my node's ranks, the ranks with my local rank on every node) of ``comm``, made on first use and kept
    (a Dup or two Splits: collective, so every rank asks at the same call). Nodes as the module doc says."""
    import os

    from collectives import nodes

    text = os.environ.get(RANKS_PER_NODE, "").strip()
    key = (id(comm), text)
    if key not in _NODES or _NODES[key][0] is not comm:
        if not text and not hasattr(comm, "Split_type"):
            raise ValueError(
                f"the hierarchical allreduce: {type(comm).__name__} has no shared-memory nodes (Split_type); "
                f"set {RANKS_PER_NODE}=K to make nodes of K consecutive ranks"
            )
        if text and not (text.isdigit() and int(text) >= 1):
            raise ValueError(f"{RANKS_PER_NODE} must be a positive integer, got {text!r}")
        if len(_NODES) >= 16:  # communicators come and go in tests: keep the most recent
            del _NODES[next(iter(_NODES))]
        _NODES[key] = comm, nodes.node_comms(comm, int(text) if text else None)
    return _NODES[key][1]


def _mpi_allreduce(comm: Any, x: np.ndarray, op: str, check: bool = True) -> np.ndarray:
    from mpi4py import MPI

    from collectives.agreement import agree
    from minidl.distributed.timeout import base_comm

    if not isinstance(base_comm(comm), MPI.Comm):
        raise TypeError(
            f"allreduce='mpi' needs an mpi4py communicator (MPI's own Allreduce); got {type(comm).__name__}. "
            "Use one of the collectives algorithms on the simulated communicator"
        )
    ops = {"sum": MPI.SUM, "prod": MPI.PROD, "max": MPI.MAX, "min": MPI.MIN}
    if op not in ops:
        raise ValueError(f"allreduce: op must be one of {tuple(ops)}, got {op!r}")
    if check:  # MPI's Allreduce does not compare: arrays of equal byte size but other dtypes give garbage
        agree(comm, x, op, "mpi.allreduce")
    x = np.ascontiguousarray(x)
    out = np.empty_like(x)
    comm.Allreduce(x, out, op=ops[op])
    return out
