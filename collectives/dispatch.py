"""One entry point per collective: ``allreduce(comm, x, op, algorithm="auto")`` and friends.

"auto" does what MPICH does with its size thresholds, but from the cost model: it predicts every
algorithm's time for this p and message size and takes the fastest (on equal predictions, the
first in cost.PREFERENCE: the ring before Rabenseifner). ``choose_algorithm`` shows the choice
and the predictions. Every rank computes the same choice from the same (p, size,
parameters); if ranks disagree on the size, the agreement check of the chosen algorithms says so.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from collectives import naive, rabenseifner, recursive_doubling, ring, tree
from collectives.check import agree
from collectives.cost import ALGORITHMS, PREFERENCE, TIE, CostParams, get_params, predict
from collectives.pof2 import allgather_blocks

_ALLREDUCE = {
    "naive": naive.allreduce,
    "tree": tree.allreduce,
    "ring": ring.allreduce,
    "recursive_doubling": recursive_doubling.allreduce,
    "rabenseifner": rabenseifner.allreduce,
}


def choose_algorithm(p: int, nbytes: int, params: CostParams | None = None) -> tuple[str, dict[str, float]]:
    """The algorithm "auto" uses for p ranks and ``nbytes`` per rank, and every algorithm's predicted seconds."""
    name, times = _choose(p, nbytes, params or get_params())
    return name, dict(times)


_memo: tuple[CostParams | None, dict] = (None, {})  # (parameters, {(p, nbytes): algorithm})


def _auto(p: int, nbytes: int) -> str:
    """choose_algorithm's answer for the current parameters, remembered (it costs as much as a short allreduce)."""
    global _memo
    params = get_params()
    memo_params, memo = _memo
    if memo_params is not params:  # new parameters (set_params, calibrate): forget the old answers
        memo = {}
        _memo = (params, memo)
    choice = memo.get((p, nbytes))
    if choice is None:
        choice = memo[(p, nbytes)] = _choose(p, nbytes, params)[0]
    return choice


@functools.lru_cache(maxsize=1024)
def _choose(p: int, nbytes: int, params: CostParams) -> tuple[str, tuple]:
    """Cached: the prediction costs microseconds, as much as a short allreduce."""
    times = {name: predict(name, p, nbytes, params) for name in ALGORITHMS}
    fastest = min(times.values())
    choice = next(name for name in PREFERENCE if times[name] <= fastest * (1 + TIE))  # ties: cost.PREFERENCE
    return choice, tuple(times.items())


def allreduce(comm: Any, x: Any, op: str = "sum", algorithm: str = "auto", check: bool = True) -> np.ndarray:
    """The elementwise ``op`` ("sum", "prod", "max", "min") of every rank's ``x``, a new array on every rank.

    ``algorithm``: "auto" (chosen by the cost model), "naive", "tree", "ring", "recursive_doubling"
    or "rabenseifner". ``x`` is never modified; every rank gets bitwise the same result. With
    ``check=False`` the agreement check on shape/dtype/op is skipped (only when you know they agree).
    """
    if algorithm == "auto":
        algorithm = _auto(comm.Get_size(), x.nbytes if isinstance(x, np.ndarray) else np.asarray(x).nbytes)
    if algorithm not in _ALLREDUCE:
        raise ValueError(f"unknown allreduce algorithm {algorithm!r}: expected auto or one of {list(_ALLREDUCE)}")
    return _ALLREDUCE[algorithm](comm, x, op, check=check)


def reduce_scatter(comm: Any, x: Any, op: str = "sum", algorithm: str = "ring") -> np.ndarray:
    """Block r (np.array_split(·, p) blocks) of the reduction of the flattened ``x``, on rank r.

    ``algorithm``: "ring" or "recursive_halving".
    """
    impl = {"ring": ring.reduce_scatter, "recursive_halving": rabenseifner.reduce_scatter}
    if algorithm not in impl:
        raise ValueError(f"unknown reduce_scatter algorithm {algorithm!r}: expected 'ring' or 'recursive_halving'")
    return impl[algorithm](comm, x, op)


def allgather(comm: Any, x: Any, algorithm: str = "ring") -> np.ndarray:
    """Every rank's ``x`` (same shape and dtype on all), stacked: shape (p, *x.shape) on every rank.

    ``algorithm``: "ring" (ring.allgather_into: p - 1 steps of one block) or "recursive_doubling"
    (pof2.allgather_blocks: log2 p steps of doubling size, + 2 when p is not a power of two).
    """
    if algorithm not in ("ring", "recursive_doubling"):
        raise ValueError(f"unknown allgather algorithm {algorithm!r}: expected 'ring' or 'recursive_doubling'")
    shape = np.shape(x)
    x, _ = agree(comm, x, None, f"{algorithm}.allgather")
    rank, p, m = comm.Get_rank(), comm.Get_size(), x.size
    out = np.empty(p * m, dtype=x.dtype)
    out[rank * m : (rank + 1) * m] = x
    if algorithm == "ring":
        ring.allgather_into(comm, out, [r * m for r in range(p + 1)])
    else:
        allgather_blocks(comm, out, m)
    return out.reshape((p, *shape))
