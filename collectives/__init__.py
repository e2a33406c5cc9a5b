"""MPI collectives written on point-to-point calls, one algorithm per file.

    import collectives
    out = collectives.allreduce(comm, x, op="sum", algorithm="auto")   # new array, same bits on every rank
    collectives.choose_algorithm(p, nbytes)        # what "auto" picks, and the cost model's predictions
    results = collectives.simulate(4, fn, *args)   # fn(comm, *args) on 4 in-process ranks; results.messages
    collectives.allreduce_time("ring", 256, 100 << 20, network="crossbar")   # virtual seconds at scale
    collectives.explain("ring", p=4, n=8)          # every transfer of a schedule, step by step
    collectives.ring.allreduce(comm, flat, np.add) # the bare schedule: no agreement check, flat arrays

``comm`` is anything with mpi4py's buffer-based point-to-point subset (Get_rank, Get_size, Send,
Recv, Sendrecv, Isend, Irecv): an ``MPI.Comm`` or a simulated one. Only NumPy is needed; mpi4py
only to run on real MPI.

The collectives (dispatch.py, varying.py: each checks that the ranks agree, then runs a schedule):
allreduce, reduce, broadcast, reduce_scatter (equal or given counts), allgather, gather, scatter,
barrier, alltoall, scan, exscan, and the v-variants allgatherv, gatherv, scatterv, alltoallv. Ops
(common.py): sum, prod, max, min, land, lor, lxor, band, bor, bxor, and maxloc/minloc on
(value, index) pairs (loc.py, ``collectives.pairs``).

The schedules, one file each, each opening with its cost and a worked example: naive (and linear
gather/scatter), tree (binomial reduce and broadcast), ring (reduce-scatter and allgather),
recursive_doubling, rabenseifner (recursive halving), fold (MPICH's fold for non-powers of two),
dissemination (the barrier), exchange (alltoall: pairwise exchange, Bruck), prefix (scan and
exscan by recursive doubling).
Around them: agreement (the check, and how it carries short vectors), cost (the alpha-beta-gamma
model), simulated (in-process ranks), walkthrough (explain: a schedule step by step), bench.
The virtual-time cluster: trace (each rank's calls, from the real code), replay (virtual time),
network and topology (links, presets, contention), rounds (the vectorized replay), calibrate.
"""

from collectives import (
    cost,
    dissemination,
    exchange,
    fold,
    hierarchical,
    naive,
    prefix,
    rabenseifner,
    recursive_doubling,
    ring,
    tree,
)
from collectives.agreement import MismatchError
from collectives.common import OPS
from collectives.cost import ALGORITHMS
from collectives.dispatch import (
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    choose_algorithm,
    exscan,
    gather,
    reduce,
    reduce_scatter,
    scan,
    scatter,
)
from collectives.loc import pairs
from collectives.replay import allreduce_time
from collectives.simulated import DeadlockError, SimulatedComm, SimulationResult, simulate
from collectives.varying import allgatherv, alltoallv, gatherv, scatterv
from collectives.walkthrough import explain

__all__ = [
    "ALGORITHMS",
    "OPS",
    "DeadlockError",
    "MismatchError",
    "SimulatedComm",
    "SimulationResult",
    "allgather",
    "hierarchical",
    "allgatherv",
    "allreduce",
    "allreduce_time",
    "alltoall",
    "alltoallv",
    "barrier",
    "broadcast",
    "choose_algorithm",
    "cost",
    "dissemination",
    "exchange",
    "explain",
    "exscan",
    "fold",
    "gather",
    "gatherv",
    "naive",
    "pairs",
    "prefix",
    "rabenseifner",
    "recursive_doubling",
    "reduce",
    "reduce_scatter",
    "ring",
    "scan",
    "scatter",
    "scatterv",
    "simulate",
    "tree",
]
