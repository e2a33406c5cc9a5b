"""A bug across communicators: a rank number of one communicator used on another.

The kit's allreduce signature: ``fn(comm, x, f)``. The function below is a two-level allreduce of
the kind written for clusters of multi-core nodes (collectives/algorithms/hierarchical.py): reduce within
pairs of ranks, allreduce among the pairs' leaders, broadcast within the pairs.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives import tree
from collectives.common import TAG_EXCHANGE, Op, combine


def leaders_rank_on_parent_comm(comm: Any, x: np.ndarray, f: Op) -> np.ndarray:
    """Messages sent on the wrong communicator: the leaders' recursive doubling computes its partner
    as a rank of the leaders' communicator (leader j) but sends on the parent communicator, where
    leader j is rank 2j.

    At p <= 2 there is one leader and no exchange, so it is right; from p = 3 a leader's message goes
    to a rank that is not a leader (or to itself), and the ranks deadlock or reduce the wrong data.
    """
    rank = comm.Get_rank()
    pair = comm.Split(rank // 2, rank)
    acc = tree.allreduce(pair, x, f)
    leaders = comm.Split(0 if pair.Get_rank() == 0 else 1, rank)
    if pair.Get_rank() == 0:
        me, q, mask = leaders.Get_rank(), leaders.Get_size(), 1
        theirs = np.empty_like(acc)
        while mask < q:  # recursive doubling over the leaders (q a power of two in the student's tests)
            peer = me ^ mask
            if peer < q:
                comm.Sendrecv(acc, peer, TAG_EXCHANGE, theirs, peer, TAG_EXCHANGE)  # peer is a leaders' rank
                acc = combine(f, acc, theirs, theirs_is_lower=peer < me)
            mask <<= 1
    tree.broadcast_into(pair, acc)
    return acc
