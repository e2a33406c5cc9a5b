"""Dissemination barrier (Hensgen, Finkel & Manber 1988): no rank leaves before every rank has arrived.

In round k rank r sends an empty message to r + 2^k and waits for one from r - 2^k (mod p). After
round k, rank r has heard, directly or through the chain, from the 2^(k+1) - 1 ranks before it;
after ceil(log2 p) rounds from all of them. Any p, no fold: the ranks wrap round.

Cost, p ranks: ceil(log2 p) alpha (messages of 0 bytes), every rank busy in every round.

Worked example, p = 5 (3 rounds):
    round 1  0->1, 1->2, 2->3, 3->4, 4->0    each rank has heard from the rank before it
    round 2  0->2, 1->3, 2->4, 3->0, 4->1    ... from the 3 before it
    round 3  0->4, 1->0, 2->1, 3->2, 4->3    ... from all 4 others
A schedule only: collectives.barrier (dispatch.py) checks first that every rank is in a barrier.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.common import TAG_BARRIER

TOKEN = np.empty(0, np.uint8)


def barrier(comm: Any) -> None:
    """Return only once every rank of ``comm`` has called it."""
    rank, p = comm.Get_rank(), comm.Get_size()
    sink = np.empty(0, np.uint8)
    distance = 1
    while distance < p:
        comm.Sendrecv(TOKEN, (rank + distance) % p, TAG_BARRIER, sink, (rank - distance) % p, TAG_BARRIER)
        distance <<= 1
