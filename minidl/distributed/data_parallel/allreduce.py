"""One entry point for every allreduce a data-parallel step can use.

``algorithm`` names a hand-written algorithm from ``collectives`` (naive, tree, ring,
recursive_doubling, rabenseifner, or auto, which picks one from the cost model) or ``"mpi"``,
the MPI library's own ``Allreduce``, the yardstick the others are measured against.
"""

from __future__ import annotations

from typing import Any

import numpy as np

ALGORITHMS = ("ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto", "mpi")


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
    import collectives

    return collectives.allreduce(comm, x, op=op, algorithm=algorithm, check=check)


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
