"""The node-aware allreduce's communicators and its checked entry point (the schedules: algorithms/hierarchical.py).

``node_comms(comm, ranks_per_node)`` makes the two communicators the schedules run on: the ranks of my node, and
the ranks with my local rank on every node. Nodes are ``comm.Split_type(MPI.COMM_TYPE_SHARED)`` (the ranks sharing
memory), or, with ``ranks_per_node=k``, ranks r // k grouped together: then both are ``GroupComm`` views of one
Dup of ``comm``, each rank working out their members alone, with no message (what lets the virtual-time tracer run
the schedule one rank at a time). ``hierarchical_allreduce`` puts one agreement check in front of the schedule
and picks step 2's algorithm (a page of dispatch, or auto's pick), as dispatch.py's entry points do for the others.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from collectives import dispatch
from collectives.agreement import agree
from collectives.algorithms import hierarchical
from collectives.algorithms.hierarchical import NAMES, SCHEDULES, predict
from collectives.auto import auto_algorithm
from collectives.common import Op
from collectives.communicators import CommView
from collectives.wire_format import wire


class GroupComm(CommView):
    """Ranks ``members`` of ``comm`` as a communicator of their own (rank i here is ``comm``'s rank members[i]).

    The point-to-point subset only; messages go through ``comm`` with the peers translated (a receive's Status,
    if asked for, names ``comm``'s rank). Build it on a Dup of the parent so that its messages never match the
    parent's. Any communicator with the subset will do: MPI's, the in-process one, the tracer's.
    """

    def __init__(self, comm: Any, members: Sequence[int]):
        super().__init__(comm)
        self.members = tuple(int(m) for m in members)
        self._rank = self.members.index(comm.Get_rank())

    def Get_rank(self) -> int:
        return self._rank

    def Get_size(self) -> int:
        return len(self.members)

    def _peer(self, rank: int) -> int:
        return self.members[rank] if rank >= 0 else rank  # ANY_SOURCE stays itself


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
        return run(local, cross, flat, f).reshape(np.shape(x))
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
        return run(local, cross, x, f)
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
    schedule_of = hierarchical.leader_schedule if schedule == "leader" else hierarchical.rs_schedule
    return lambda local, cross, flat, f: schedule_of(local, cross, flat, f, _across(algorithm))


def _across(algorithm: str) -> hierarchical.Across:
    """Step 2: ``algorithm``'s page (or auto's pick) over the cross communicator, unchecked; x itself on one node."""

    def run(cross: Any, x: np.ndarray, f: Op) -> np.ndarray:
        if cross.Get_size() == 1:
            return x
        name = auto_algorithm(cross.Get_size(), x.nbytes) if algorithm == "auto" else algorithm
        return dispatch.PAGES[name].allreduce(wire(cross, x.dtype), x, f)

    return run


__all__ = ["GroupComm", "NAMES", "SCHEDULES", "allreduce", "free", "hierarchical_allreduce", "node_comms", "predict"]
