"""``--parallel ps`` and ``--parallel local-sgd`` for ``python -m minidl.train lm|cnn``: other data-parallel schemes.

    mpiexec -n 3 python -m minidl.train cnn --parallel ps                        # 1 server, 2 workers, sync
    mpiexec -n 3 python -m minidl.train cnn --parallel ps --async --staleness-bound 4
    mpiexec -n 5 python -m minidl.train cnn --parallel ps --servers 2            # parameters sharded over 2
    mpiexec -n 4 python -m minidl.train cnn --parallel local-sgd --average-every 4
    mpiexec -n 3 python -m minidl.train lm --parallel ps --async                 # the LSTM LM likewise

``minidl.train.lm`` and ``.cnn`` call ``train_lm`` / ``train_cnn(ctx, args, preset, config)`` for these
modes, and ``add_arguments(parser)`` adds their flags to both programs' parsers.

- **ps** (``minidl.distributed.parameter_server``): ranks 0..S-1 hold the parameters and SGD (with the
  preset's warmup + cosine schedule, stepped per update on the server); ranks S..P-1 are workers, each
  with its own shard of the data (``--batch-size`` per worker). Synchronous by default (the server
  averages all W gradients: the same steps as ``--parallel data`` with W ranks, without batch-norm
  synchronization); ``--async`` applies each gradient on arrival (Downpour), workers pulling every
  ``--fetch-every`` steps, with an optional ``--staleness-bound``. The staleness histogram is printed.
  The LM's workers carry their own LSTM state over their own streams and clip their own gradients.
- **local-sgd** (``minidl.distributed.local_sgd``): every rank steps its own replica and the parameters
  (and batch-norm running statistics) are averaged every ``--average-every`` steps.

Progress lines come from the first worker (rank S; a server has no loss to report); the final lines
(rank 0) give the test score of the final model, throughput, and the bytes every rank sent + received
per step, counted on the wire (``CountingComm``). Not supported here: ``--resume``, ``--save``,
``--compression``, ``--sync-bn`` (a clear error).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.counting import sent_and_received
from minidl.distributed.data_parallel.local_sgd import average_buffers
from minidl.distributed.parameter_server.protocol import check_roles
from minidl.train import cnn, common
from minidl.train.common import Context

MODES = ("ps", "local-sgd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``--parallel ps`` and ``--parallel local-sgd``."""
    group = parser.add_argument_group("parameter server / local SGD (--parallel ps|local-sgd, under mpiexec -n P)")
    group.add_argument(
        "--servers",
        type=common.positive_int,
        default=1,
        metavar="S",
        help="ps: server ranks (0..S-1) holding the sharded parameters (default 1)",
    )
    group.add_argument(
        "--async",
        dest="asynchronous",
        action="store_true",
        help="ps: apply each worker's gradient on arrival (Downpour) instead of averaging all",
    )
    group.add_argument(
        "--fetch-every",
        type=common.positive_int,
        default=1,
        metavar="N",
        help="ps --async: workers pull fresh parameters every N steps (default 1)",
    )
    group.add_argument(
        "--staleness-bound",
        type=int,
        default=None,
        metavar="s",
        help="ps --async: refuse gradients more than s updates old (the worker recomputes)",
    )
    group.add_argument(
        "--average-every",
        type=common.positive_int,
        default=4,
        metavar="k",
        help="local-sgd: average the parameters every k steps (default 4)",
    )


def check_flags(args: argparse.Namespace) -> None:
    if args.parallel not in MODES:
        raise SystemExit(f"minidl.train.schemes trains --parallel ps|local-sgd, not {args.parallel!r}")
    unsupported = [
        flag
        for flag, on in (
            ("--resume", args.resume),
            ("--save", args.save),
            ("--compression", args.compression != "none"),
            ("--sync-bn", getattr(args, "sync_bn", False)),
        )
        if on
    ]
    if unsupported:
        raise SystemExit(f"--parallel {args.parallel}: {', '.join(unsupported)} not supported in this mode")
    if args.staleness_bound is not None and not args.asynchronous:
        raise SystemExit("--staleness-bound needs --async (a synchronous parameter server is never stale)")


class Scheme:
    """What the two programs share under ``--parallel ps|local-sgd``: roles, the optimizer each rank runs,
    the end of the run (close / average, collect the parameters) and the final report (bytes, staleness)."""

    def __init__(self, ctx: Context, args: argparse.Namespace):
        check_flags(args)
        self.ctx, self.args = ctx, args
        self.ps = args.parallel == "ps"
        self.servers = args.servers if self.ps else 0
        if self.ps:
            check_roles(ctx.size, self.servers)
        self.workers, self.worker = ctx.size - self.servers, ctx.rank - self.servers
        self.is_server = ctx.rank < self.servers
        self.counted = dist.CountingComm(ctx.comm)
        self.stats: Any = None
        self.started = time.perf_counter()

    def describe(self) -> str:
        a = self.args
        if not self.ps:
            return f"local SGD: {self.workers} ranks, parameters averaged every {a.average_every} steps"
        mode = "synchronous"
        if a.asynchronous:
            bound = f", staleness bound {a.staleness_bound}" if a.staleness_bound is not None else ""
            mode = f"asynchronous{bound}, pull every {a.fetch_every}"
        return f"parameter server: {self.servers} server(s) + {self.workers} workers, {mode}"

    def updates(self, steps: int) -> int:
        """Optimizer steps on a server for ``steps`` steps per worker (asynchronous: one per gradient)."""
        return steps * (self.workers if self.ps and self.args.asynchronous else 1)

    def log(self, *parts: Any) -> None:
        """Progress from the first worker (a server has no loss to report)."""
        if self.ctx.rank == self.servers:
            print(f"[worker rank {self.ctx.rank}]", *parts, flush=True)

    def serve(
        self,
        model: nn.Module,
        make_optimizer: Callable[[list], optim.Optimizer],
        after_update: Callable[[optim.Optimizer, int], Any],
    ) -> None:
        """A server rank: hold this shard and its optimizer until every worker is done."""
        holder: dict[str, optim.Optimizer] = {}

        def build(params: list) -> optim.Optimizer:
            holder["opt"] = make_optimizer(params)
            return holder["opt"]

        self.stats = dist.ParameterServer(
            model,
            build,
            self.counted,
            self.servers,
            self.args.asynchronous,
            self.args.staleness_bound,
            after_update=lambda version: after_update(holder["opt"], version),
        ).serve()

    def optimizer(self, model: nn.Module, base: optim.Optimizer) -> Any:
        """A worker rank's optimizer: a ``PSWorker`` (pulls the servers' parameters now) or a ``LocalSGD``."""
        a = self.args
        if self.ps:
            return dist.PSWorker(
                model,
                self.counted,
                self.servers,
                asynchronous=a.asynchronous,
                fetch_every=a.fetch_every,
                staleness_bound=a.staleness_bound,
            )
        dist.broadcast_parameters(model, comm=self.ctx.comm)
        return dist.LocalSGD(base, a.average_every, comm=self.counted, allreduce=a.allreduce)

    @staticmethod
    def step(opt: Any, closure: Callable[[], Any]) -> None:
        """``closure`` recomputes the gradient if a bounded-staleness server refuses it."""
        opt.step(closure) if isinstance(opt, dist.PSWorker) else opt.step()

    def finish(self, opt: Any, model: nn.Module, steps: int) -> dict[str, Any]:
        """End the run on every rank; leave the final model everywhere; return the traffic and staleness numbers."""
        if isinstance(opt, dist.PSWorker):
            opt.close()
        elif isinstance(opt, dist.LocalSGD) and opt.steps % opt.average_every:
            opt.average()
        elapsed = time.perf_counter() - self.started
        sent, received = sent_and_received(self.counted.traffic_matrix())
        if self.ps:
            dist.collect_parameters(model, self.ctx.comm, self.servers)
        else:
            average_buffers(model, self.ctx.comm, self.args.allreduce)
        stats = self.stats
        gathered = dist.gather_states(
            {"staleness": np.asarray(stats.staleness, np.int64), "rejected": stats.rejected}
            if stats is not None
            else {},
            root=0,
            comm=self.ctx.comm,
        )
        out: dict[str, Any] = {
            "parallel": self.args.parallel,
            "seconds": elapsed,
            "ranks": self.ctx.size,
            "servers": self.servers,
            "bytes_per_step": (sent + received) / max(steps, 1),
        }
        staleness = [g["staleness"] for g in gathered or [] if g]
        if staleness:
            all_s = np.concatenate(staleness)
            out.update(
                staleness=all_s,
                staleness_mean=float(all_s.mean()),
                staleness_max=int(all_s.max()),
                rejected=sum(int(g["rejected"]) for g in gathered if g),
            )
        return out

    def report(self, result: dict[str, Any]) -> None:
        """Rank 0: bytes per step of every rank and, for the parameter server, the staleness histogram."""
        S = self.servers
        self.ctx.log(
            "KiB sent + received per step: "
            + ", ".join(
                f"rank {r}{' (server)' if r < S else ''} {b / 1024:,.1f}"
                for r, b in enumerate(result["bytes_per_step"])
            )
        )
        if "staleness" in result:
            s = result["staleness"]
            hist = " ".join(f"{k}:{n}" for k, n in enumerate(np.bincount(s)) if n)
            refused = f" | {result['rejected']} gradients refused as too stale" if result["rejected"] else ""
            self.ctx.log(
                f"staleness over {s.size} updates: mean {s.mean():.2f}, max {s.max()} | histogram {hist}" + refused
            )


def train_cnn(ctx: Context, args: argparse.Namespace, preset: str, cfg: cnn.CNNConfig) -> dict[str, Any]:
    """Train the ResNet of ``cfg`` with a parameter server or local SGD; returns the run's numbers on every rank."""
    scheme = Scheme(ctx, args)
    task = cnn.load_task(args, cfg)
    dtype = minidl.get_default_dtype()
    minidl.manual_seed(args.seed)  # the same initial model on every rank (the servers' values are pulled anyway)
    model = nn.resnet(cfg.depth, task.num_outputs, task.x_train.shape[1], cfg.width)
    n_train = task.x_train.shape[0]
    steps_per_epoch = n_train // (scheme.workers * cfg.batch_size)
    total = min(args.max_steps or cfg.epochs * steps_per_epoch, cfg.epochs * steps_per_epoch)
    updates = scheme.updates(total)
    warmup = max(1, min(int(cfg.warmup_epochs * updates / cfg.epochs), updates - 1))

    def make_optimizer(params: list) -> optim.Optimizer:
        return optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)

    def schedule_of(opt: optim.Optimizer) -> Any:
        return optim.lr_scheduler.warmup_cosine(opt, warmup, max(updates, warmup + 1))

    common.print_header(
        ctx,
        f"ResNet-{cfg.depth} (width {cfg.width}), preset {preset!r}, {scheme.describe()}",
        [
            f"data: {task.name}: train {task.x_train.shape}, test {task.x_test.shape}",
            f"batch {cfg.batch_size}/worker, {total} steps/worker; SGD lr {cfg.lr} momentum {cfg.momentum} wd "
            f"{cfg.weight_decay}, warmup {warmup} updates then cosine",
        ],
    )
    opt = None
    if scheme.is_server:
        schedules: list[Any] = []  # the server's schedule, on the optimizer of its shard

        def make_server_optimizer(params: list) -> optim.Optimizer:
            server_opt = make_optimizer(params)
            schedules.append(schedule_of(server_opt))
            return server_opt

        scheme.serve(model, make_server_optimizer, lambda server_opt, version: schedules[0].step())
    else:
        base = make_optimizer(list(model.parameters()))
        opt = scheme.optimizer(model, base)
        schedule = schedule_of(base) if not scheme.ps else None
        sampler = dist.DistributedSampler(
            n_train, cfg.batch_size, seed=args.seed, rank=scheme.worker, size=scheme.workers
        )
        log_every = args.log_every or max(1, total // 10)
        step, loss_sum, seen = 0, 0.0, 0
        while step < total:
            sampler.set_epoch(step // steps_per_epoch)
            for idx in sampler:
                x, y = task.x_train[idx].astype(dtype, copy=False), task.y_train[idx]
                opt.zero_grad()
                loss = cnn.loss_fn(task, model(minidl.tensor(x)), y)
                loss.backward()
                scheme.step(opt, lambda x=x, y=y: cnn.loss_fn(task, model(minidl.tensor(x)), y).backward())
                if schedule is not None:
                    schedule.step()
                step += 1
                loss_sum, seen = loss_sum + float(loss.data) * len(idx), seen + len(idx)
                if step % log_every == 0 or step == total:
                    rate = scheme.workers * step * cfg.batch_size / (time.perf_counter() - scheme.started)
                    scheme.log(f"step {step}/{total} | loss {loss_sum / seen:.4f} | {rate:,.0f} images/s (all workers)")
                    loss_sum, seen = 0.0, 0
                if step >= total:
                    break
    run = scheme.finish(opt, model, total)
    # A server's batch-norm statistics never moved: score the final parameters on the first worker's model.
    result = (
        cnn.evaluate(Context(common.SingleProcess()), model, task, args.eval_batch_size)
        if ctx.rank == scheme.servers
        else None
    )
    result = dist.broadcast_state(result, root=scheme.servers, comm=ctx.comm)
    images_per_s = scheme.workers * total * cfg.batch_size / run["seconds"]
    result.update(run, preset=preset, steps=total, images_per_s=images_per_s, params=common.snapshot(model))
    ctx.log(
        f"test {cnn.describe(task, result)} | {total} steps/worker in {common.format_duration(run['seconds'])} "
        f"on {ctx.size} ranks, {images_per_s:,.0f} images/s"
    )
    scheme.report(result)
    return result


def train_lm(ctx: Context, args: argparse.Namespace, preset: str, cfg: Any) -> dict[str, Any]:
    """Train the LSTM LM of ``cfg`` with a parameter server or local SGD. Each worker has its own B streams
    (``batchify`` over the workers) and carries its own LSTM state; it clips its own gradient to the global
    norm before pushing (a synchronous server then averages clipped gradients, not clipping the average)."""
    from minidl.data.text import batchify, bptt_batches, num_bptt_batches
    from minidl.models.lm import LSTMLanguageModel
    from minidl.train import lm

    scheme = Scheme(ctx, args)
    corpus = lm.load_corpus(args, preset)
    B, T = cfg.batch_size, cfg.num_steps
    train_data = batchify(corpus.train, B, max(scheme.worker, 0), scheme.workers)
    steps_per_epoch = num_bptt_batches(train_data.shape[0], T)
    if steps_per_epoch == 0:
        raise ValueError(f"the training split is too short for {scheme.workers * B} streams of {T} words")
    minidl.manual_seed(args.seed)
    model = LSTMLanguageModel(
        len(corpus.vocab), cfg.hidden_size, cfg.num_layers, cfg.dropout, init_scale=cfg.init_scale
    )
    total = min(args.max_steps or cfg.epochs * steps_per_epoch, cfg.epochs * steps_per_epoch)
    per_epoch_updates = scheme.updates(steps_per_epoch)
    common.print_header(
        ctx,
        f"LSTM language model, preset {preset!r}, {scheme.describe()}",
        [
            f"corpus {corpus.name}: vocabulary {len(corpus.vocab):,}, train {corpus.train.size:,} words",
            f"B={B} streams/worker x T={T}, {total} steps/worker; SGD lr {cfg.lr} (x{cfg.lr_decay:.3g} per epoch after "
            f"{cfg.decay_after}), clip {cfg.max_grad_norm} per worker",
        ],
    )
    opt = None
    if scheme.is_server:

        def set_lr(o: optim.Optimizer, version: int) -> None:  # the epoch this update belongs to
            common.set_lr(o, cfg.lr_at(1 + version // per_epoch_updates))

        scheme.serve(model, lambda params: optim.SGD(params, lr=cfg.lr), set_lr)
    else:
        minidl.manual_seed(int(np.random.SeedSequence([args.seed, ctx.rank]).generate_state(1)[0]))  # own dropout
        params = list(model.parameters())
        base = optim.SGD(params, lr=cfg.lr)
        opt = scheme.optimizer(model, base)
        log_every = args.log_every or max(1, total // 10)
        step, loss_sum, words = 0, 0.0, 0
        while step < total:
            common.set_lr(base, cfg.lr_at(1 + step // steps_per_epoch))
            state = model.init_hidden(B)
            for x, y in bptt_batches(train_data, T):
                state = model.detach_state(state)
                start_state = state

                def closure(x=x, y=y, start_state=start_state) -> None:  # recompute on refreshed parameters
                    logits, _ = model(x, start_state)
                    F.cross_entropy(logits, y.reshape(-1)).backward()
                    optim.clip_grad_norm(params, cfg.max_grad_norm)

                opt.zero_grad()
                logits, state = model(x, state)
                loss = F.cross_entropy(logits, y.reshape(-1))
                loss.backward()
                optim.clip_grad_norm(params, cfg.max_grad_norm)
                scheme.step(opt, closure)
                step += 1
                loss_sum, words = loss_sum + float(loss.data) * y.size, words + y.size
                if step % log_every == 0 or step == total:
                    rate = scheme.workers * step * B * T / (time.perf_counter() - scheme.started)
                    scheme.log(
                        f"step {step}/{total} | ppl {np.exp(loss_sum / words):.2f} | {rate:,.0f} words/s (all workers)"
                    )
                    loss_sum, words = 0.0, 0
                if step >= total:
                    break
    run = scheme.finish(opt, model, total)
    test_ppl = float(np.exp(lm.evaluate(ctx, model, corpus.test, args.eval_batch_size, T)))  # all ranks: same model
    words_per_s = scheme.workers * total * B * T / run["seconds"]
    result = {
        **run,
        "preset": preset,
        "steps": total,
        "test_ppl": test_ppl,
        "words_per_s": words_per_s,
        "params": common.snapshot(model),
    }
    ctx.log(
        f"{lm.score_line(result, corpus)} | {total} steps/worker in {common.format_duration(run['seconds'])} "
        f"on {ctx.size} ranks, "
        f"{words_per_s:,.0f} words/s"
    )
    scheme.report(result)
    return result
