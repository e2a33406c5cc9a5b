"""The data-parallel schemes side by side: same model, same data, same number of ranks.

Schemes (Singh 2017, "Scaling in the Deep Learning Applications": the axes synchronous vs asynchronous, centralized vs decentralized, gradient
averaging vs parameter averaging):

=============  ==================  ==============  =======================  =============================
scheme         synchronization     topology        what is averaged         communication per step
=============  ==================  ==============  =======================  =============================
allreduce      synchronous         decentralized   gradients, every step    ~2 x model per rank (ring)
ps-sync        synchronous         centralized     gradients, every step    W x model in + out at a server
ps-async       asynchronous        centralized     none (applied one by one) same as ps-sync, no waiting
local-sgd      synchronous (1/k)   decentralized   parameters, every k      ~2 x model / k per rank
=============  ==================  ==============  =======================  =============================

``run_scheme(comm, task, scheme, steps)`` trains ``task`` on every rank of ``comm`` (the servers
of a PS scheme do not compute gradients, so W = P - S workers there, W = P otherwise; each worker
always takes ``task.batch_size`` samples per step) and records, per rank, the training loss and
the clock at every step, and the bytes it sent to every other rank (``CountingComm``).
``compare(comm, task, steps)`` runs all schemes in turn and returns, on rank 0, one ``SchemeResult``
per scheme: samples/s, bytes per step (busiest rank and mean rank, sent + received), the loss
curves, the held-out loss of the final model and, for the parameter server, the staleness record.
``format_table`` and ``plot`` present them; ``benchmarks/parallel_schemes.py`` and tutorial 07 call them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.counting import CountingComm, sent_and_received
from minidl.distributed.data_parallel.local_sgd import LocalSGD
from minidl.distributed.data_parallel.optimizer import DistributedOptimizer
from minidl.distributed.parameter_server import ParameterServer, PSWorker, collect_parameters
from minidl.distributed.state import broadcast_parameters
from minidl.distributed.wire import gather_states
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer
from minidl.tensor import Tensor

SCHEMES = ("allreduce", "ps-sync", "ps-async", "local-sgd")


@dataclass
class Task:
    """A model and its data, the same for every scheme.

    ``make_model()`` must build the same initial weights on every rank (seed inside it);
    ``batch(worker, workers, step)`` gives worker ``worker``'s batch at ``step`` (``batch_size`` samples);
    ``loss(model, batch)`` a scalar Tensor; ``evaluate(model)`` the held-out loss (a float).
    """

    name: str
    make_model: Callable[[], Module]
    make_optimizer: Callable[[list[Tensor]], Optimizer]
    batch: Callable[[int, int, int], Any]
    loss: Callable[[Module, Any], Tensor]
    evaluate: Callable[[Module], float]
    batch_size: int


def image_task(
    n_train: int = 4000,
    n_test: int = 500,
    size: int = 16,
    hidden: int = 128,
    batch_size: int = 32,
    lr: float = 0.1,
    momentum: float = 0.9,
    seed: int = 0,
) -> Task:
    """An MLP on the generated multi-label shape images (``minidl.data.make_shapes``): small enough for
    a laptop, and a real task (5 independent labels, binary cross-entropy; a constant predictor
    scores ~0.67 nats per label)."""
    from minidl.data.images import make_shapes

    x_train, y_train = make_shapes(n_train, size=size, seed=2 * seed)
    x_test, y_test = make_shapes(n_test, size=size, seed=2 * seed + 1)
    dtype = minidl.get_default_dtype()
    x_train, x_test = x_train.reshape(n_train, -1).astype(dtype), x_test.reshape(n_test, -1).astype(dtype)
    order = np.random.default_rng(seed).permutation(n_train)

    def make_model() -> Module:
        minidl.manual_seed(seed)
        return nn.Sequential(nn.Linear(size * size, hidden), nn.ReLU(), nn.Linear(hidden, y_train.shape[1]))

    def batch(worker: int, workers: int, step: int) -> tuple[np.ndarray, np.ndarray]:
        # global batch `step` of workers * b consecutive samples of one fixed permutation; worker's slice of it
        start = (step * workers + worker) * batch_size
        idx = order[np.arange(start, start + batch_size) % n_train]
        return x_train[idx], y_train[idx]

    def loss(model: Module, xy: tuple[np.ndarray, np.ndarray]) -> Tensor:
        return F.binary_cross_entropy_with_logits(model(minidl.tensor(xy[0])), xy[1].astype(dtype))

    def evaluate(model: Module) -> float:
        with minidl.no_grad():
            return float(loss(model, (x_test, y_test)).item())

    return Task(
        f"MLP {size * size}-{hidden}-{y_train.shape[1]} on {size}x{size} shape images",
        make_model,
        lambda ps: optim.SGD(ps, lr=lr, momentum=momentum),
        batch,
        loss,
        evaluate,
        batch_size,
    )


# ----------------------------------------------------------------------------- one scheme on this rank
@dataclass
class RankRecord:
    """What one rank saw while training with one scheme."""

    scheme: str
    rank: int
    role: str  # "worker" or "server"
    losses: np.ndarray  # training loss at each step (empty on a server)
    times: np.ndarray  # seconds since the common start, at the end of each step
    seconds: float  # until this rank finished its part
    sent_to: np.ndarray  # bytes sent to each rank
    server_stats: dict[str, Any] = field(default_factory=dict)

    def as_tree(self) -> dict[str, Any]:
        return {
            "scheme": self.scheme,
            "rank": self.rank,
            "role": self.role,
            "losses": self.losses,
            "times": self.times,
            "seconds": self.seconds,
            "sent_to": self.sent_to,
            "server_stats": self.server_stats,
        }


def run_scheme(
    comm: Any,
    task: Task,
    scheme: str,
    steps: int,
    num_servers: int = 1,
    fetch_every: int = 1,
    staleness_bound: int | None = None,
    average_every: int = 4,
    algorithm: str = "ring",
    model: Module | None = None,
) -> tuple[RankRecord, Module]:
    """Train ``task`` for ``steps`` steps per worker with ``scheme`` on this rank; every rank calls it.

    Returns this rank's record and the final model, the same on every rank (the servers' parameters
    for the PS schemes, the last average for local SGD).
    """
    if scheme not in SCHEMES:
        raise ValueError(f"unknown scheme {scheme!r}; choose from {SCHEMES}")
    model = task.make_model() if model is None else model
    counted = CountingComm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    ps = scheme.startswith("ps-")
    servers = num_servers if ps else 0
    workers = size - servers
    is_server = rank < servers
    losses, times = np.full(0 if is_server else steps, np.nan), np.full(0 if is_server else steps, np.nan)
    stats: dict[str, Any] = {}
    if not ps:
        broadcast_parameters(model, root=0, comm=comm)
    comm.Barrier()
    start = time.perf_counter()
    if is_server:
        server = ParameterServer(
            model,
            task.make_optimizer,
            counted,
            servers,
            asynchronous=scheme == "ps-async",
            staleness_bound=staleness_bound,
        )
        s = server.serve()
        stats = {**s.as_dict(), "staleness": np.asarray(s.staleness, np.int64), "rounds": s.rounds}
    else:
        worker = rank - servers
        step_fn = _worker_step_fn(
            scheme, model, task, counted, servers, fetch_every, staleness_bound, average_every, algorithm
        )
        for t in range(steps):
            losses[t] = step_fn(task.batch(worker, workers, t))
            times[t] = time.perf_counter() - start
        step_fn(None)  # finish: close the PS connection, or average one last time
    seconds = time.perf_counter() - start
    sent_to = counted.sent_to.copy()
    if ps:
        collect_parameters(model, comm, servers)
    return RankRecord(scheme, rank, "server" if is_server else "worker", losses, times, seconds, sent_to, stats), model


def _worker_step_fn(
    scheme: str,
    model: Module,
    task: Task,
    comm: Any,
    servers: int,
    fetch_every: int,
    staleness_bound: int | None,
    average_every: int,
    algorithm: str,
) -> Callable[[Any], float]:
    """One training step of ``scheme`` on a batch -> its loss; called with None at the end to finish."""
    if scheme.startswith("ps-"):
        opt: Any = PSWorker(
            model,
            comm,
            servers,
            asynchronous=scheme == "ps-async",
            fetch_every=fetch_every if scheme == "ps-async" else 1,
            staleness_bound=staleness_bound if scheme == "ps-async" else None,
        )
    elif scheme == "allreduce":
        opt = DistributedOptimizer(
            task.make_optimizer(list(model.parameters())), allreduce=algorithm, comm=comm, measure_wait=False
        )
    else:
        opt = LocalSGD(task.make_optimizer(list(model.parameters())), average_every, comm=comm, allreduce=algorithm)

    def step(batch: Any) -> float:
        if batch is None:
            if isinstance(opt, PSWorker):
                opt.close()
            elif isinstance(opt, LocalSGD) and opt.steps % opt.average_every:
                opt.average()
            return float("nan")
        opt.zero_grad()
        loss = task.loss(model, batch)
        loss.backward()

        def closure() -> None:  # a PS gradient refused as too stale is recomputed on the fresh parameters
            task.loss(model, batch).backward()

        opt.step(closure) if isinstance(opt, PSWorker) else opt.step()
        return float(loss.item())

    return step


# ----------------------------------------------------------------------------- all schemes, summarized
@dataclass
class SchemeResult:
    """One scheme's numbers over all ranks (built on rank 0)."""

    scheme: str
    label: str
    ranks: int
    servers: int
    workers: int
    steps: int
    batch_size: int
    seconds: float  # wall time of the slowest rank
    samples_per_second: float
    bytes_per_step_max: float  # sent + received by the busiest rank, per worker step
    bytes_per_step_mean: float  # the same, averaged over ranks
    bytes_per_step_worker: float  # the same, averaged over workers
    loss_curve: np.ndarray  # mean training loss over workers at each step
    time_curve: np.ndarray  # mean clock over workers at the end of each step
    final_loss: float  # held-out loss of the final model
    staleness: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    rejected: int = 0

    @property
    def staleness_text(self) -> str:
        if self.staleness.size == 0:
            return "-"
        return f"{self.staleness.mean():.2f} / {self.staleness.max()}"


def summarize(records: Sequence[dict[str, Any]], label: str, batch_size: int, final_loss: float) -> SchemeResult:
    """Rank 0: one ``SchemeResult`` from every rank's ``RankRecord.as_tree()``."""
    workers = [r for r in records if r["role"] == "worker"]
    servers = [r for r in records if r["role"] == "server"]
    steps = len(workers[0]["losses"])
    matrix = np.stack([np.asarray(r["sent_to"]) for r in records])
    sent, received = sent_and_received(matrix)
    per_rank = (sent + received) / max(steps, 1)
    worker_ranks = [r["rank"] for r in workers]
    seconds = max(r["seconds"] for r in records)
    staleness = (
        np.concatenate([np.asarray(s["server_stats"]["staleness"]) for s in servers])
        if servers and records[0]["scheme"] == "ps-async"
        else np.zeros(0, np.int64)
    )
    return SchemeResult(
        scheme=records[0]["scheme"],
        label=label,
        ranks=len(records),
        servers=len(servers),
        workers=len(workers),
        steps=steps,
        batch_size=batch_size,
        seconds=seconds,
        samples_per_second=len(workers) * steps * batch_size / seconds,
        bytes_per_step_max=float(per_rank.max()),
        bytes_per_step_mean=float(per_rank.mean()),
        bytes_per_step_worker=float(per_rank[worker_ranks].mean()),
        loss_curve=np.mean([r["losses"] for r in workers], axis=0),
        time_curve=np.mean([r["times"] for r in workers], axis=0),
        final_loss=final_loss,
        staleness=staleness,
        rejected=sum(int(s["server_stats"].get("rejected", 0)) for s in servers),
    )


DEFAULT_RUNS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("allreduce", "allreduce (grad avg)", {}),
    ("ps-sync", "PS sync", {}),
    ("ps-async", "PS async", {}),
    ("local-sgd", "local SGD k=4", {"average_every": 4}),
)


def compare(
    comm: Any, task: Task, steps: int, runs: Sequence[tuple[str, str, dict[str, Any]]] = DEFAULT_RUNS
) -> list[SchemeResult] | None:
    """Run each (scheme, label, options) of ``runs`` in turn on all ranks; rank 0 gets the results."""
    results = []
    for scheme, label, options in runs:
        record, model = run_scheme(comm, task, scheme, steps, **options)
        records = gather_states(record.as_tree(), root=0, comm=comm)
        if comm.Get_rank() == 0:
            results.append(summarize(records, label, task.batch_size, task.evaluate(model)))
    return results if comm.Get_rank() == 0 else None


def format_table(results: Sequence[SchemeResult]) -> str:
    """A plain-text table, one row per scheme."""
    head = (
        f"{'scheme':22s} {'ranks':>9s} {'samples/s':>10s} {'KiB/step':>9s} {'KiB/step':>9s} "
        f"{'train loss':>10s} {'test loss':>9s} {'staleness':>10s}"
    )
    sub = (
        f"{'':22s} {'(S+W)':>9s} {'':>10s} {'busiest':>9s} {'worker':>9s} {'(last 10)':>10s} {'':>9s} {'mean/max':>10s}"
    )
    lines = [head, sub, "-" * len(head)]
    for r in results:
        tail = float(np.mean(r.loss_curve[-10:]))
        lines.append(
            f"{r.label:22s} {f'{r.servers}+{r.workers}':>9s} {r.samples_per_second:10.0f} "
            f"{r.bytes_per_step_max / 1024:9.1f} {r.bytes_per_step_worker / 1024:9.1f} {tail:10.4f} "
            f"{r.final_loss:9.4f} {r.staleness_text:>10s}"
        )
    return "\n".join(lines)


def plot(results: Sequence[SchemeResult], path: str, title: str = "") -> None:
    """Loss against steps and against wall time, one line per scheme, saved to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 3.8))
    for r in results:
        smooth = _moving_average(r.loss_curve, 5)
        a.plot(np.arange(1, len(smooth) + 1), smooth, label=r.label)
        b.plot(r.time_curve, smooth, label=r.label)
    a.set(xlabel="step (per worker)", ylabel="training loss (moving average of 5)")
    b.set(xlabel="wall time (s)", ylabel="training loss")
    a.legend()
    if title:
        fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _moving_average(x: np.ndarray, n: int) -> np.ndarray:
    c = np.cumsum(np.insert(np.asarray(x, np.float64), 0, 0.0))
    k = np.minimum(np.arange(1, len(x) + 1), n)
    return (c[1:] - c[np.arange(1, len(x) + 1) - k]) / k


def allreduce_bytes_per_rank(nbytes: int, p: int) -> float:
    """Bytes a rank sends + receives in one ring allreduce of ``nbytes``: 2 x 2 (p-1)/p x nbytes."""
    return 4.0 * (p - 1) / p * nbytes


def server_bytes_per_step(nbytes: int, workers: int, servers: int = 1) -> float:
    """Bytes a server sends + receives per synchronous step: W gradients in, W parameter copies out."""
    return 2.0 * workers * nbytes / servers


__all__ = [
    "SCHEMES",
    "DEFAULT_RUNS",
    "RankRecord",
    "SchemeResult",
    "Task",
    "compare",
    "format_table",
    "image_task",
    "plot",
    "run_scheme",
    "summarize",
    "allreduce_bytes_per_rank",
    "server_bytes_per_step",
]
