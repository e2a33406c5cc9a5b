"""Exercise 8: ZeRO stage 1, the optimizer state sharded over the ranks (minidl/distributed/data_parallel/zero.py).

Rajbhandari, Rasley, Ruwase & He, "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models"
(2020). Data parallelism keeps on each of p ranks all n parameters, n gradient values and, for SGD with
momentum, n momentum values. ZeRO-1 keeps the momentum of shard r only on rank r: the elements lo:hi of the
flat parameter vector, block r of np.array_split(range(n), p) (the first n % p shards have one more).

SGD with momentum (PyTorch's), per element, with g the gradient averaged over the p ranks:

    v = momentum * v + g
    w = w - lr * v

One ZeRO-1 step on rank r, for the flat parameters w [n] (the same on every rank) and this rank's gradient:

    1. reduce-scatter the gradients: collectives.reduce_scatter(comm, grad, op="sum") returns on rank r the
       sum over ranks of grad[lo:hi] (the first half of a ring allreduce); divide it by p
    2. update w[lo:hi] and v (hi - lo values: the only optimizer state this rank keeps)
    3. allgather the updated shards into every rank's w: collectives.allgatherv(comm, shard) returns every
       rank's shard end to end, and the counts (the second half of the ring allreduce)

The messages cost what one allreduce costs, 2 (p - 1) / p n per rank; the state costs n / p per rank.
The checker compares w after a few steps with one process that averages the gradients and keeps all of v,
and checks that v is shard-sized, that every rank holds the same bits and that grad is left untouched.

Check it:  python -m minidl.exercises check zero1
"""

from __future__ import annotations

from typing import Any

import numpy as np

import collectives  # noqa: F401  (you will need collectives.reduce_scatter and collectives.allgatherv)


def shard_bounds(n: int, p: int, r: int) -> tuple[int, int]:
    """(lo, hi): the elements of shard r of n over p ranks, np.array_split's block r."""
    raise NotImplementedError("exercise: shard_bounds")


class ZeroSGD:
    """SGD with momentum over a flat parameter vector of n elements, its momentum sharded (ZeRO-1)."""

    def __init__(self, comm: Any, n: int, lr: float, momentum: float):
        self.comm, self.n, self.lr, self.momentum = comm, n, lr, momentum
        self.lo, self.hi = shard_bounds(n, comm.Get_size(), comm.Get_rank())
        self.velocity = None  # replace by this rank's momentum buffer: zeros, one value per element of the shard
        raise NotImplementedError("exercise: ZeroSGD.__init__ (the velocity)")

    def step(self, w: np.ndarray, grad: np.ndarray) -> None:
        """One step, in place in w [n] on every rank; grad [n] is this rank's gradient (left unchanged)."""
        raise NotImplementedError("exercise: ZeroSGD.step")
