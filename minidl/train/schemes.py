"""``--parallel ps`` and ``--parallel local-sgd`` for ``python -m minidl.train cnn``: the other data-parallel schemes.

    mpiexec -n 3 python -m minidl.train.schemes cnn --parallel ps                        # 1 server, 2 workers, sync
    mpiexec -n 3 python -m minidl.train.schemes cnn --parallel ps --async --staleness-bound 4
    mpiexec -n 5 python -m minidl.train.schemes cnn --parallel ps --servers 2            # parameters sharded over 2
    mpiexec -n 4 python -m minidl.train.schemes cnn --parallel local-sgd --average-every 4

(``python -m minidl.train.schemes cnn ...`` takes every flag of ``python -m minidl.train cnn`` too.)

- **ps** (``minidl.distributed.parameter_server``): ranks 0..S-1 hold the parameters and SGD (with the
  preset's warmup + cosine schedule, stepped per update on the server); ranks S..P-1 are workers, each
  with its own shard of the data (``--batch-size`` per worker). Synchronous by default (the server
  averages all W gradients: the same steps as ``--parallel data`` with W ranks, without batch-norm
  synchronization); ``--async`` applies each gradient on arrival (Downpour), workers pulling every
  ``--fetch-every`` steps, with an optional ``--staleness-bound``. The staleness histogram is printed.
- **local-sgd** (``minidl.distributed.local_sgd``): every rank steps its own replica and the parameters
  (and batch-norm running statistics) are averaged every ``--average-every`` steps.

Progress lines come from the first worker (rank S; a server has no loss to report); the final lines
(rank 0) give the test score of the final model, throughput, and the bytes every rank sent + received
per step, counted on the wire (``TrafficComm``). Not supported here: ``--resume``, ``--save``,
``--compression``, ``--sync-bn`` (a clear error).
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np

import minidl
import minidl.distributed as dist
from minidl import nn, optim
from minidl.distributed.local_sgd import average_buffers
from minidl.distributed.parameter_server import check_roles
from minidl.distributed.traffic import sent_and_received
from minidl.train import cnn, common
from minidl.train.common import Context

MODES = ("ps", "local-sgd")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags of ``--parallel ps`` and ``--parallel local-sgd``."""
    group = parser.add_argument_group("parameter server / local SGD (--parallel ps|local-sgd, under mpiexec -n P)")
    group.add_argument("--servers", type=common.positive_int, default=1, metavar="S",
                       help="ps: server ranks (0..S-1) holding the sharded parameters (default 1)")
    group.add_argument("--async", dest="asynchronous", action="store_true",
                       help="ps: apply each worker's gradient on arrival (Downpour) instead of averaging all")
    group.add_argument("--fetch-every", type=common.positive_int, default=1, metavar="N",
                       help="ps --async: workers pull fresh parameters every N steps (default 1)")
    group.add_argument("--staleness-bound", type=int, default=None, metavar="s",
                       help="ps --async: refuse gradients more than s updates old (the worker recomputes)")
    group.add_argument("--average-every", type=common.positive_int, default=4, metavar="k",
                       help="local-sgd: average the parameters every k steps (default 4)")


def _check_flags(args: argparse.Namespace) -> None:
    if args.parallel not in MODES:
        raise SystemExit(f"minidl.train.schemes runs --parallel ps|local-sgd, not {args.parallel!r}")
    unsupported = [flag for flag, on in (("--resume", args.resume), ("--save", args.save),
                                         ("--compression", args.compression != "none"),
                                         ("--sync-bn", getattr(args, "sync_bn", False))) if on]
    if unsupported:
        raise SystemExit(f"--parallel {args.parallel}: {', '.join(unsupported)} not supported in this mode")
    if args.staleness_bound is not None and not args.asynchronous:
        raise SystemExit("--staleness-bound needs --async (a synchronous parameter server is never stale)")


def train_cnn(ctx: Context, args: argparse.Namespace, preset: str, cfg: cnn.CNNConfig) -> dict[str, Any]:
    """Train the ResNet of ``cfg`` with a parameter server or local SGD; returns the run's numbers on every rank."""
    task = cnn.load_task(args, cfg)
    dtype = minidl.get_default_dtype()
    ps = args.parallel == "ps"
    S = args.servers if ps else 0
    if ps:
        check_roles(ctx.size, S)
    W, worker = ctx.size - S, ctx.rank - S
    counted = dist.TrafficComm(ctx.comm)
    minidl.manual_seed(args.seed)  # the same initial model on every rank (the servers' values are pulled anyway)
    model = nn.resnet(cfg.depth, task.num_outputs, task.x_train.shape[1], cfg.width)
    n_train = task.x_train.shape[0]
    steps_per_epoch = n_train // (W * cfg.batch_size)
    total = min(args.max_steps or cfg.epochs * steps_per_epoch, cfg.epochs * steps_per_epoch)
    updates = total * (W if ps and args.asynchronous else 1)  # optimizer steps the schedule spans
    warmup = max(1, min(int(cfg.warmup_epochs * updates / cfg.epochs), updates - 1))

    def make_optimizer(params: list) -> optim.Optimizer:
        return optim.SGD(params, lr=cfg.lr, momentum=cfg.momentum, weight_decay=cfg.weight_decay)

    what = (f"parameter server: {S} server(s) + {W} workers, "
            + ("asynchronous" + (f", staleness bound {args.staleness_bound}" if args.staleness_bound is not None
                                 else "") + f", pull every {args.fetch_every}" if args.asynchronous else "synchronous")
            if ps else f"local SGD: {W} ranks, parameters averaged every {args.average_every} steps")
    common.print_header(ctx, f"ResNet-{cfg.depth} (width {cfg.width}), preset {preset!r}, {what}", [
        f"data: {task.name}: train {task.x_train.shape}, test {task.x_test.shape}",
        f"batch {cfg.batch_size}/worker, {total} steps/worker; SGD lr {cfg.lr} momentum {cfg.momentum} wd "
        f"{cfg.weight_decay}, warmup {warmup} updates then cosine"])
    started = time.perf_counter()
    log = print if ctx.rank == S else (lambda *a, **k: None)  # the first worker reports progress
    stats = None
    if ctx.rank < S:
        holder: dict[str, Any] = {}  # the server builds its optimizer (and schedule) on its own shard

        def make_server_optimizer(params: list) -> optim.Optimizer:
            holder["opt"] = make_optimizer(params)
            holder["schedule"] = optim.lr_scheduler.warmup_cosine(holder["opt"], warmup, max(updates, warmup + 1))
            return holder["opt"]

        server = dist.ParameterServer(model, make_server_optimizer, counted, S, asynchronous=args.asynchronous,
                                      staleness_bound=args.staleness_bound,
                                      after_update=lambda version: holder["schedule"].step())
        stats = server.serve()
    else:
        base = make_optimizer(list(model.parameters()))
        if ps:
            opt = dist.PSWorker(model, counted, S, asynchronous=args.asynchronous, fetch_every=args.fetch_every,
                                staleness_bound=args.staleness_bound)
        else:
            dist.broadcast_parameters(model, comm=ctx.comm)
            opt = dist.LocalSGD(base, args.average_every, comm=counted, allreduce=args.allreduce)
            schedule = optim.lr_scheduler.warmup_cosine(base, warmup, max(updates, warmup + 1))
        sampler = dist.DistributedSampler(n_train, cfg.batch_size, seed=args.seed, rank=worker, size=W)
        log_every = args.log_every or max(1, total // 10)
        step, loss_sum, seen = 0, 0.0, 0
        while step < total:
            sampler.set_epoch(step // steps_per_epoch)
            for idx in sampler:
                x, y = task.x_train[idx].astype(dtype, copy=False), task.y_train[idx]
                opt.zero_grad()
                loss = cnn.loss_fn(task, model(minidl.tensor(x)), y)
                loss.backward()
                if ps:
                    opt.step(lambda x=x, y=y: cnn.loss_fn(task, model(minidl.tensor(x)), y).backward())
                else:
                    opt.step()
                    schedule.step()
                step += 1
                loss_sum, seen = loss_sum + float(loss.data) * len(idx), seen + len(idx)
                if step % log_every == 0 or step == total:
                    elapsed = time.perf_counter() - started
                    log(f"[worker rank {ctx.rank}] step {step}/{total} | loss {loss_sum / seen:.4f} | "
                        f"{W * step * cfg.batch_size / elapsed:,.0f} images/s (all workers)", flush=True)
                    loss_sum, seen = 0.0, 0
                if step >= total:
                    break
        if ps:
            opt.close()
        elif opt.steps % opt.average_every:
            opt.average()
    elapsed = time.perf_counter() - started
    matrix = counted.traffic_matrix()
    if ps:
        dist.collect_parameters(model, ctx.comm, S)
    else:
        average_buffers(model, ctx.comm, args.allreduce)
    # A server's batch-norm statistics never moved: score the final parameters on the first worker's model.
    scorer = S
    result = cnn.evaluate(Context(common.SingleProcess()), model, task, args.eval_batch_size) \
        if ctx.rank == scorer else None
    result = dist.broadcast_state(result, root=scorer, comm=ctx.comm)
    server_stats = dist.gather_states(stats.as_dict() | {"staleness": np.asarray(stats.staleness, np.int64)}
                                      if stats else {}, root=0, comm=ctx.comm)
    sent, received = sent_and_received(matrix)
    per_step = (sent + received) / max(total, 1)
    images_per_s = W * total * cfg.batch_size / elapsed
    result.update(preset=preset, parallel=args.parallel, steps=total, seconds=elapsed, images_per_s=images_per_s,
                  ranks=ctx.size, servers=S, bytes_per_step=per_step, params=common.snapshot(model))
    if ctx.rank == 0:
        ctx.log(f"test {cnn.describe(task, result)} | {total} steps/worker in {common.format_duration(elapsed)} on "
                f"{ctx.size} ranks, {images_per_s:,.0f} images/s")
        ctx.log("KiB sent + received per step: " + ", ".join(
            f"rank {r}{' (server)' if r < S else ''} {b / 1024:,.1f}" for r, b in enumerate(per_step)))
        staleness = [s["staleness"] for s in server_stats if s] if ps else []
        if staleness:
            all_s = np.concatenate(staleness)
            hist = " ".join(f"{s}:{n}" for s, n in enumerate(np.bincount(all_s)) if n)
            rejected = sum(int(s["rejected"]) for s in server_stats if s)
            ctx.log(f"staleness over {all_s.size} updates: mean {all_s.mean():.2f}, max {all_s.max()} | "
                    f"histogram {hist}" + (f" | {rejected} gradients refused as too stale" if rejected else ""))
            result.update(staleness_mean=float(all_s.mean()), staleness_max=int(all_s.max()), rejected=rejected)
    return result


def build_parser(program: str = "cnn") -> argparse.ArgumentParser:
    """``minidl.train.cnn``'s parser with "ps" and "local-sgd" among ``--parallel``'s choices, and their flags."""
    if program != "cnn":
        raise SystemExit(f"usage: python -m minidl.train.schemes cnn --parallel {{ps,local-sgd}} ...; got {program!r} "
                         "(the language model is not wired to these modes)")
    parser = cnn.build_parser(argparse.ArgumentParser(prog="python -m minidl.train.schemes cnn",
                                                      description=__doc__.split("\n")[0]))
    for action in parser._actions:
        if action.dest == "parallel":
            action.choices = tuple(dict.fromkeys([*(action.choices or ()), *MODES]))
            action.default = "ps"
    add_arguments(parser)
    return parser


def run_cnn(args: argparse.Namespace) -> dict[str, Any]:
    """Standalone: seed, dtype, join the MPI job, train; an exception on any rank aborts the job."""
    _check_flags(args)
    minidl.set_default_dtype(np.float64 if args.dtype == "float64" else np.float32)
    comm = dist.init()
    ctx = Context(comm, comm.Get_rank(), comm.Get_size(), args.parallel, args.allreduce)
    preset = args.preset or ("quick" if common.quick_requested(args) else "demo")
    config = common.apply_overrides(cnn.PRESETS[preset], args, cnn.OVERRIDES)
    return dist.run(lambda: train_cnn(ctx, args, preset, config), comm=comm)


def main(argv: list[str] | None = None) -> dict[str, Any]:
    argv = sys.argv[1:] if argv is None else argv
    program = argv[0] if argv else ""
    return run_cnn(build_parser(program).parse_args(argv[1:]))


if __name__ == "__main__":
    main()
