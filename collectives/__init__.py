"""MPI collectives written on point-to-point calls, one algorithm per file.

    import collectives
    out = collectives.allreduce(comm, x, op="sum", algorithm="auto")   # new array, same bits on every rank
    collectives.choose_algorithm(p, nbytes)        # what "auto" picks, and the cost model's predictions
    results = collectives.simulate(4, fn, *args)   # fn(comm, *args) on 4 in-process ranks; results.messages
    collectives.allreduce_time("ring", 256, 100 << 20, network="crossbar")   # virtual seconds at scale
    collectives.explain("ring", p=4, n=8)          # every transfer of a schedule, step by step
    collectives.ring.allreduce(comm, flat, np.add) # the bare schedule: no agreement check, flat arrays

``comm`` is anything with mpi4py's buffer-based point-to-point subset (Get_rank, Get_size, Send,
Recv, Sendrecv, Isend, Irecv): an ``MPI.Comm`` or an in-process one. Only NumPy is needed; mpi4py
only to run on real MPI.

    algorithms/     the schedules, one page each: naive, tree, ring, recursive_doubling,
                    rabenseifner, fold, dissemination, exchange, prefix, hierarchical
    dispatch.py     the collectives (allreduce, reduce, broadcast, reduce_scatter, allgather, gather,
                    scatter, barrier, alltoall, scan, exscan); varying.py: the v-variants
    agreement.py    the check that every rank brings the same call, and how it carries short vectors
    common.py       the ops (sum, prod, max, min, logical and bitwise; loc.py: maxloc/minloc), tags, blocks
    cost.py         the alpha-beta-gamma model; auto.py: what algorithm="auto" picks from it
    fastpath.py     the short checked allreduce in one exchange
    inprocess.py    P ranks as threads of one process: simulate, SimulatedComm, Message, traffic
    walkthrough.py  explain: a schedule step by step; bench.py: timings under MPI
    virtual_time/   the virtual-time cluster: trace, replay, rounds, network, topology, flows, calibrate
"""

from collectives import cost
from collectives.agreement import MismatchError
from collectives.algorithms import (
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
from collectives.auto import choose_algorithm
from collectives.common import OPS
from collectives.cost import ALGORITHMS
from collectives.dispatch import (
    allgather,
    allreduce,
    alltoall,
    barrier,
    broadcast,
    exscan,
    gather,
    reduce,
    reduce_scatter,
    scan,
    scatter,
)
from collectives.inprocess import DeadlockError, Message, SimulatedComm, SimulationResult, simulate, traffic
from collectives.loc import pairs
from collectives.varying import allgatherv, alltoallv, gatherv, scatterv
from collectives.virtual_time.replay import allreduce_time
from collectives.walkthrough import explain

__all__ = [
    "ALGORITHMS",
    "OPS",
    "DeadlockError",
    "Message",
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
    "traffic",
    "tree",
]
