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
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.check import agree
from collectives.common import TAG_ALLGATHER, TAG_REDUCE_SCATTER, block_bounds


def reduce_scatter_into(comm: Any, x: np.ndarray, acc: np.ndarray, f: np.ufunc, b: list[int]) -> None:
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


def allreduce(comm: Any, x: Any, op: str = "sum", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` of every rank's ``x``, as a new array of x's shape on every rank."""
    shape = np.shape(x)
    x, f = agree(comm, x, op, "ring.allreduce", check=check)
    b = block_bounds(x.size, comm.Get_size())
    acc = np.empty_like(x)
    reduce_scatter_into(comm, x, acc, f, b)
    allgather_into(comm, acc, b)
    return acc.reshape(shape)


def reduce_scatter(comm: Any, x: Any, op: str = "sum") -> np.ndarray:
    """Block r of the reduction of the flattened ``x`` over all ranks, on rank r.

    Blocks split the n elements as np.array_split(·, p) does (n // p each, one more on the first
    n % p ranks), like MPI_Reduce_scatter with those counts.
    """
    x, f = agree(comm, x, op, "ring.reduce_scatter")
    rank, b = comm.Get_rank(), block_bounds(x.size, comm.Get_size())
    acc = np.empty_like(x)
    reduce_scatter_into(comm, x, acc, f, b)
    return acc[b[rank] : b[rank + 1]].copy()
