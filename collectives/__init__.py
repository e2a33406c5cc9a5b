"""MPI collectives written on point-to-point calls, one algorithm per file.

    import collectives
    out = collectives.allreduce(comm, x, op="sum", algorithm="auto")   # new array, same bits on every rank
    collectives.ring.allreduce(comm, x)            # likewise naive, tree, recursive_doubling, rabenseifner
    collectives.choose_algorithm(p, nbytes)        # what "auto" picks, and the cost model's predictions
    results = collectives.simulate(4, fn, *args)   # fn(comm, *args) on 4 in-process ranks; results.messages
    collectives.allreduce_time("ring", 256, 100 << 20, network="crossbar")   # virtual seconds at scale

``comm`` is anything with mpi4py's buffer-based point-to-point subset (Get_rank, Get_size, Send,
Recv, Sendrecv, Isend, Irecv): an ``MPI.Comm`` or a simulated one. Only NumPy is needed; mpi4py
only to run on real MPI. Files: naive, tree (binomial reduce and broadcast), ring (reduce-scatter
and allgather), recursive_doubling, rabenseifner (recursive halving), pof2 (non-powers of two),
check (agreement of the ranks), cost (the alpha-beta-gamma model), simulated, bench; the virtual-time
cluster: trace (each rank's calls, from the real code), replay (virtual time), network, flows.
"""

from collectives import cost, naive, rabenseifner, recursive_doubling, ring, tree
from collectives.check import MismatchError
from collectives.common import OPS
from collectives.cost import ALGORITHMS
from collectives.dispatch import allgather, allreduce, choose_algorithm, reduce_scatter
from collectives.naive import gather, scatter
from collectives.replay import allreduce_time
from collectives.simulated import DeadlockError, SimulatedComm, SimulationResult, simulate
from collectives.tree import broadcast, reduce

__all__ = [
    "ALGORITHMS",
    "OPS",
    "DeadlockError",
    "MismatchError",
    "SimulatedComm",
    "SimulationResult",
    "allgather",
    "allreduce",
    "allreduce_time",
    "broadcast",
    "choose_algorithm",
    "cost",
    "gather",
    "naive",
    "rabenseifner",
    "recursive_doubling",
    "reduce",
    "reduce_scatter",
    "ring",
    "scatter",
    "simulate",
    "tree",
]
