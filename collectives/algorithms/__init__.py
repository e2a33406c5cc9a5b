"""The schedules, one file each, each opening with its cost and a worked example (as MPICH keeps
``coll/allreduce/allreduce_intra_*.c``). They take flat arrays and a reduction function and run no
agreement check: dispatch.py's entry points put that in front of them.

    naive               everything through rank 0 (and the linear gather and scatter)
    tree                binomial reduce and broadcast
    ring                reduce-scatter and allgather around a ring
    recursive_doubling  whole vectors exchanged at distance 1, 2, 4, ...
    rabenseifner        recursive halving, then recursive doubling
    fold                MPICH's fold of p down to a power of two
    dissemination       the barrier
    exchange            alltoall: pairwise exchange, Bruck
    prefix              scan and exscan by recursive doubling
    hierarchical        within each node, then across nodes: via the node leaders, or by blocks (the two
                        communicators and the checked entry point: collectives/nodes.py)
"""
