"""Local SGD (model averaging): every rank takes k optimizer steps on its own, then the parameters are averaged.

Gradient averaging (``DistributedOptimizer``) communicates every step and keeps the replicas
identical. Parameter averaging lets them drift for k steps and then replaces every replica by the
mean (Zinkevich et al. 2010; McMahan et al. 2017, "FedAvg"; Lin et al. 2020, "Don't use large
mini-batches, use local SGD"):

    for k steps on each rank r:  w_r <- w_r - lr * g_r(w_r)        (no communication)
    then:                        w_r <- (1/P) sum_q w_q             (one allreduce of the parameters)

so the communication per step falls by a factor k. With k = 1 and plain SGD it *is* gradient
averaging: (1/P) sum_q (w - lr g_q) = w - lr (1/P) sum_q g_q. With k > 1 the replicas compute their
gradients at different points, so it is a different (noisier) algorithm, which still converges.
Only the parameters are averaged; optimizer state (momentum buffers) stays local to each rank.

    dist.broadcast_parameters(model)                       # start identical
    opt = dist.LocalSGD(optim.SGD(model.parameters(), lr=0.1), average_every=4)
    for x, y in batches:
        opt.zero_grad(); loss_fn(model(x), y).backward(); opt.step()
    opt.average()                                           # leave every rank with the same model
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from minidl.distributed import lockstep
from minidl.distributed.comm import get_comm
from minidl.distributed.data_parallel.allreduce import ALGORITHMS, allreduce, check_algorithm
from minidl.distributed.fingerprint import check_layout, optimizer_rows, parameter_rows
from minidl.distributed.timeout import activity
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor


def average_parameters(params: Iterable[Tensor], comm: Any = None, algorithm: str = "ring") -> None:
    """Replace every parameter by its mean over the ranks, in place: one allreduce per dtype."""
    average_arrays([p.data for p in params], comm, algorithm)


def average_buffers(module: Module, comm: Any = None, algorithm: str = "ring") -> None:
    """Average a module's floating-point buffers over the ranks (batch norm's running statistics)."""
    average_arrays([b for _, b in module.named_buffers() if b is not None and b.dtype.kind == "f"], comm, algorithm)


def average_arrays(arrays: Iterable[np.ndarray], comm: Any = None, algorithm: str = "ring") -> None:
    """Replace each array by its mean over the ranks, in place: the arrays of one dtype go in one allreduce."""
    comm = get_comm(comm)
    size = comm.Get_size()
    if size == 1:
        return
    by_dtype: dict[np.dtype, list[np.ndarray]] = {}
    for a in arrays:
        by_dtype.setdefault(a.dtype, []).append(a)
    for group in by_dtype.values():
        flat = np.concatenate([a.reshape(-1) for a in group])
        mean = allreduce(comm, flat, algorithm, "sum") * (1.0 / size)
        start = 0
        for a in group:
            a[...] = mean[start : start + a.size].reshape(a.shape)
            start += a.size


class LocalSGD:
    """Wrap an optimizer: ``step()`` updates locally, and every ``average_every``-th step averages the parameters.

    Everything else (``param_groups``, ``state``, ``zero_grad``, ``state_dict``) is the wrapped
    optimizer's, so LR schedulers work on it.

    Attributes:
        steps: local steps taken; ``averages``: allreductions done; ``comm_seconds``: time in them.
    """

    def __init__(
        self,
        optimizer: Optimizer,
        average_every: int = 4,
        comm: Any = None,
        allreduce: str = "ring",
        named_parameters: Any = None,
    ):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"LocalSGD wraps a minidl optimizer (SGD, Adam, ...), got {type(optimizer).__name__}")
        if int(average_every) != average_every or average_every < 1:
            raise ValueError(f"LocalSGD: average_every must be an integer >= 1, got {average_every!r}")
        self.optimizer = optimizer
        self.average_every = int(average_every)
        self.comm = get_comm(comm)
        self.algorithm = check_algorithm(allreduce)
        self.steps = 0
        self.averages = 0
        self.comm_seconds = 0.0
        self._check_ranks_agree(named_parameters)
        if self.comm.Get_size() > 1:
            lockstep.track(self.comm, self)  # the end of the run is agreed on, as DistributedOptimizer's

    @property
    def updates(self) -> int:
        """Local steps taken (lockstep.py's count)."""
        return self.steps

    def _check_ranks_agree(self, named_parameters: Any) -> None:
        """Same model layout, optimizer (class, hyperparameters), average_every and algorithm on every rank,
        else the same MismatchError on every rank (``fingerprint.py``): before the first average, not after."""
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        by_id = {id(p): n for n, p in named_parameters} if named_parameters is not None else {}
        rows = parameter_rows((by_id.get(id(p)), p) for p in params) + optimizer_rows(self.optimizer)
        settings = [
            ("average_every", self.average_every, int),
            ("allreduce", ALGORITHMS.index(self.algorithm), lambda c: ALGORITHMS[c]),
        ]
        check_layout(self.comm, rows, "LocalSGD", settings)

    def __getattr__(self, name: str) -> Any:  # param_groups, state, zero_grad, state_dict, ...
        return getattr(self.optimizer, name)

    @property
    def will_average(self) -> bool:
        """Whether the next ``step()`` ends with an averaging."""
        return (self.steps + 1) % self.average_every == 0

    def step(self, closure: Callable[[], Any] | None = None) -> bool:
        """One local update; returns True when it was followed by parameter averaging. (``closure``, for the
        protocol every optimizer shares, is never needed: a local step does not refuse a gradient.)"""
        self.optimizer.step()
        self.steps += 1
        if self.steps % self.average_every:
            return False
        self.average()
        return True

    def average(self) -> None:
        """Average the parameters over the ranks now (call it after the last step of a run)."""
        start = time.perf_counter()
        if self.comm.Get_size() > 1:  # the averaging of step k meets the others' averaging of step k, or raises
            lockstep.agree_on_step(self.comm, self.steps - 1)
        with activity("LocalSGD.average", step=self.steps):
            average_parameters([p for g in self.optimizer.param_groups for p in g["params"]], self.comm, self.algorithm)
        self.comm_seconds += time.perf_counter() - start
        self.averages += 1

    def finish(self) -> None:
        """End of training: average once more if steps were taken since the last averaging."""
        if self.steps % self.average_every:
            self.average()

    def __repr__(self) -> str:
        head = f"LocalSGD(average_every={self.average_every}, allreduce={self.algorithm!r})"
        return f"{head}\nwrapping {self.optimizer!r}"


__all__ = ["LocalSGD", "average_arrays", "average_buffers", "average_parameters"]
