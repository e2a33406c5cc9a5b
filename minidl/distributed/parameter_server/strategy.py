"""``--parallel ps``: the parameter server as a strategy of the training loop (``minidl.train.loop.fit``).

Ranks 0..S-1 hold the sharded parameters and the optimizer (the task's learning-rate schedule stepped per
update); ranks S..P-1 are workers, each on its own share of the data. Synchronous by default (the server
averages all W gradients: the steps of ``--parallel data`` with W ranks); ``--async`` applies each gradient on
arrival (Downpour), workers pulling every ``--fetch-every`` steps, with an optional ``--staleness-bound`` (a
refused gradient is recomputed). It shares local SGD's frame (``data_parallel/strategy.py``): no evaluation
between epochs (the servers are busy), progress from the first worker, the bytes every rank sent + received per
step counted on the wire (``CountingComm``); it adds the staleness histogram to the report.

A parameter server outlives a worker that stops answering (silent half of MINIDL_COMM_TIMEOUT): asynchronous, or
synchronous with ``--drop-lost-workers``, the job ends on the ranks left; one that really dies needs ``mpiexec
-disable-auto-cleanup`` (MPICH), else the launcher ends every rank (``parameter_server/survivors.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

import minidl.distributed as dist
from minidl.distributed.counting import sent_and_received
from minidl.distributed.data_parallel.strategy import LocalSGD
from minidl.distributed.parameter_server import survivors
from minidl.distributed.parameter_server.protocol import check_roles
from minidl.distributed.parameter_server.server import LostWorkerError
from minidl.distributed.strategy import reseed_per_rank
from minidl.distributed.timeout import train_timeout
from minidl.nn.container import Sequential
from minidl.nn.module import Module


class ParameterServer(LocalSGD):
    """servers hold the parameters, workers push gradients, synchronously or --async."""

    def __init__(self, ctx: Any, args: Any):
        self.servers = args.servers
        check_roles(ctx.size, self.servers)
        super().__init__(ctx, args)
        self.lost: list[int] = []  # workers the servers went on without

    def build(self, task: Any, model: Module) -> None:
        self.model, self.base, self.params = model, None, list(model.parameters())
        self.net = Sequential(*(unit for _, unit in task.chain(model)))
        if not self.serves:
            reseed_per_rank(self.args.seed, self.ctx.rank)
            a = self.args
            self.opt = dist.PSWorker(
                model, self.counted, self.servers, a.asynchronous, a.fetch_every, a.staleness_bound
            )

    def describe(self) -> list[str]:
        a, mode = self.args, "synchronous"
        if a.asynchronous:
            bound = f", staleness bound {a.staleness_bound}" if a.staleness_bound is not None else ""
            mode = f"asynchronous{bound}, pull every {a.fetch_every}"
        return [f"parameter server: {self.servers} server(s) + {self.workers} workers, {mode}"]

    def set_lr(self, lr: float) -> None:
        """A worker holds no optimizer: the servers step the schedule per update (``serve``)."""
        if self.base is not None:
            super().set_lr(lr)

    def serve(self, task: Any, steps_per_epoch: int) -> None:
        """This rank is a server: hold its shard and its optimizer until every worker is done."""
        per_epoch = steps_per_epoch * (self.workers if self.args.asynchronous else 1)  # updates per epoch
        held: list[Any] = []

        def build(params: list) -> Any:
            held.append(task.optimizer(params))
            self.base = held[0]
            self.set_lr(task.lr(0, per_epoch))
            return held[0]

        a, timeout = self.args, train_timeout()
        server = dist.ParameterServer(
            self.model,
            build,
            self.counted,
            self.servers,
            a.asynchronous,
            a.staleness_bound,
            after_update=lambda version: self.set_lr(task.lr(version, per_epoch)),
            # a worker silent half the communication timeout (MINIDL_COMM_TIMEOUT) is lost: the workers left, waiting
            # on this server meanwhile, must not reach their own timeout first
            lost_after=timeout / 2 if timeout else None,
            drop_lost_workers=a.drop_lost_workers,
        )
        try:
            self.stats = server.serve()
        except LostWorkerError as e:
            # synchronous without --drop-lost-workers: one line naming the lost worker, and the job ends
            survivors.end_job(e, self.ctx.comm)

    def finish(self) -> None:
        """After the last step; with workers lost (``mpiexec -disable-auto-cleanup``: see parameter_server/survivors.py)
        the ranks left finish the job, scores and report, among themselves."""
        self.lost = self.stats.lost if self.serves else self.opt.close()
        if self.lost:
            self.ctx.comm = survivors.without(self.ctx.comm, self.lost)
            self.ctx.rank, self.ctx.size = self.ctx.comm.Get_rank(), self.ctx.comm.Get_size()
            self.eval_share = (self.ctx.rank, self.ctx.size)
            survivors.exit_without_finalize()  # MPI_Finalize would wait for the lost rank forever
        p = self.counted.inner.Get_size()
        rows = np.zeros((p, p))  # bytes sent, a row per rank of the job (a lost worker's stays 0)
        rows[self.counted.inner.Get_rank()] = self.counted.sent_to
        self.traffic = sent_and_received(
            dist.allreduce(self.ctx.comm, rows.reshape(-1), "ring", "sum").reshape(p, p).astype(np.int64)
        )
        self.collect()

    def update(self, task: Any, batch: Any) -> None:
        def closure() -> None:  # a bounded-staleness server refused the gradient: recompute on its parameters
            self.criterion(task, task.forward(self.net, batch, again=True), batch).backward()
            self.clip(task.max_grad_norm)

        self.opt.step(closure)

    def total(self, values: Any) -> np.ndarray:
        return np.asarray(values, np.float64)  # the first worker's own (the servers are busy serving)

    def collect(self) -> None:
        """The servers' final parameters everywhere, then the first worker's batch-norm statistics (a
        server's never moved), so every rank holds the same model to score."""
        dist.collect_parameters(self.model, self.ctx.comm, self.servers)
        dist.broadcast_parameters(self.model, root=self.servers, comm=self.ctx.comm)

    def staleness(self, result: dict[str, Any]) -> list[str]:
        lost = []
        if self.lost:
            names = ", ".join(str(w) for w in self.lost)
            lost = [f"worker(s) {names} lost: finished on the {self.ctx.size} ranks left"]
        return lost + self.server_stats(result)

    def server_stats(self, result: dict[str, Any]) -> list[str]:
        stats = self.stats
        mine = {"staleness": np.asarray(stats.staleness, np.int64), "rejected": stats.rejected} if stats else {}
        gathered = dist.gather_states(mine, root=0, comm=self.ctx.comm)
        if not gathered:
            return []
        s = np.concatenate([g["staleness"] for g in gathered if g])
        rejected = sum(int(g["rejected"]) for g in gathered if g)
        result.update(staleness=s, staleness_mean=float(s.mean()), staleness_max=int(s.max()), rejected=rejected)
        hist = " ".join(f"{k}:{n}" for k, n in enumerate(np.bincount(s)) if n)
        refused = f" | {rejected} gradients refused as too stale" if rejected else ""
        return [f"staleness over {s.size} updates: mean {s.mean():.2f}, max {s.max()} | histogram {hist}{refused}"]
