"""Ring allreduce (Patarasuk & Yuan 2009; Baidu, Horovod): a ring reduce-scatter, then a ring allgather.

The vector is cut into p blocks. Rank r sends to r + 1 and receives from r - 1, one block per step.
    reduce-scatter  p - 1 steps; in step s rank r sends block r-s-1 and adds its own contribution to
                    block r-s-2 as it arrives; after p - 1 steps rank r holds block r fully reduced.
    allgather       p - 1 steps; the finished blocks travel once more round the ring.

Cost, p ranks, n bytes (each step moves n/p bytes per rank, all links busy at once):
    reduce-scatter  (p - 1) alpha + (p - 1)/p n beta + (p - 1)/p n gamma
    allgather       (p - 1) alpha + (p - 1)/p n beta
    allreduce       2 (p - 1) alpha + 2 (p - 1)/p n beta + (p - 1)/p n gamma
The bandwidth term is the lower bound for any allreduce and does not grow with p; the latency
term does, so the ring is the long-message algorithm. Each block is reduced by one chain of ranks
and then copied, so all ranks end with the same bits.

Worked example: every transfer at p = 4, n = 8, as ``collectives.explain("ring", p=4, n=8)``
prints it from the simulator's record of this code's messages (tests/test_collectives_explain.py
holds this table to it). "b3=x0+x1 -> 2" is block 3, holding the sum of ranks 0 and 1's
contributions, sent to rank 2:

    ring allreduce, p = 4, n = 8; x_r is rank r's vector; blocks (elements): b0 = 0:2, b1 = 2:4, b2 = 4:6, b3 = 6:8
    step  phase          rank 0 sends         rank 1 sends         rank 2 sends         rank 3 sends
       1  reduce-scatter b3=x0 -> 1           b0=x1 -> 2           b1=x2 -> 3           b2=x3 -> 0
       2  reduce-scatter b2=x0+x3 -> 1        b3=x0+x1 -> 2        b0=x1+x2 -> 3        b1=x2+x3 -> 0
       3  reduce-scatter b1=x0+x2+x3 -> 1     b2=x0+x1+x3 -> 2     b3=x0+x1+x2 -> 3     b0=x1+x2+x3 -> 0
       4  allgather      b0=x0+x1+x2+x3 -> 1  b1=x0+x1+x2+x3 -> 2  b2=x0+x1+x2+x3 -> 3  b3=x0+x1+x2+x3 -> 0
       5  allgather      b3=x0+x1+x2+x3 -> 1  b0=x0+x1+x2+x3 -> 2  b1=x0+x1+x2+x3 -> 3  b2=x0+x1+x2+x3 -> 0
       6  allgather      b2=x0+x1+x2+x3 -> 1  b3=x0+x1+x2+x3 -> 2  b0=x0+x1+x2+x3 -> 3  b1=x0+x1+x2+x3 -> 0
    afterwards every rank holds x0+x1+x2+x3 in every block

In the reduce-scatter each block travels round the ring gathering one contribution a step and
arrives complete at its owner (block r at rank r after step 3); in the allgather it travels round
once more as it is. Schedules on flat arrays whose agreement is already checked (dispatch.py).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.common import TAG_ALLGATHER, TAG_REDUCE_SCATTER, Op, block_bounds


def reduce_scatter_into(comm: Any, x: np.ndarray, acc: np.ndarray, f: Op, b: list[int]) -> None:
    """Ring reduce-scatter of flat x (read only): afterwards acc[b[r]:b[r+1]] is block r reduced over all ranks.

    The received partial sums go straight into acc and this rank's own block of x is added in
    place, so there is neither a copy of x nor a temporary buffer.
    """
    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 1):
        send, recv = (rank - s - 1) % p, (rank - s - 2) % p
        src = x if s == 0 else acc  # block r-1 goes out as it is; later blocks are partial sums
        part = acc[b[recv] : b[recv + 1]]
        comm.Sendrecv(src[b[send] : b[send + 1]], right, TAG_REDUCE_SCATTER, part, left, TAG_REDUCE_SCATTER)
        f(part, x[b[recv] : b[recv + 1]], out=part)
    if p == 1:
        acc[...] = x


def allgather_into(comm: Any, buf: np.ndarray, b: list[int]) -> None:
    """Ring allgather in place: rank r holds block r of buf; afterwards every rank holds all of it."""
    rank, p = comm.Get_rank(), comm.Get_size()
    right, left = (rank + 1) % p, (rank - 1) % p
    for s in range(p - 1):
        send, recv = (rank - s) % p, (rank - s - 1) % p
        comm.Sendrecv(buf[b[send] : b[send + 1]], right, TAG_ALLGATHER, buf[b[recv] : b[recv + 1]], left, TAG_ALLGATHER)


def allreduce(comm: Any, x: np.ndarray, f: Op = np.add) -> np.ndarray:
    """f over every rank's flat ``x``, as a new flat array on every rank."""
    b = block_bounds(x.size, comm.Get_size())
    acc = np.empty_like(x)
    reduce_scatter_into(comm, x, acc, f, b)
    allgather_into(comm, acc, b)
    return acc


def reduce_scatter(comm: Any, x: np.ndarray, f: Op = np.add, b: list[int] | None = None) -> np.ndarray:
    """Block r (elements b[r]:b[r+1]) of f over every rank's flat ``x``, on rank r.

    ``b``: the block offsets, like MPI_Reduce_scatter's counts (common.bounds_of(counts)); by
    default np.array_split(., p)'s: n // p each, one more on the first n % p ranks.
    """
    rank, b = comm.Get_rank(), b or block_bounds(x.size, comm.Get_size())
    acc = np.empty_like(x)
    reduce_scatter_into(comm, x, acc, f, b)
    return acc[b[rank] : b[rank + 1]].copy()
