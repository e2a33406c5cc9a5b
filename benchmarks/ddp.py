"""Data-parallel LSTM LM training: minidl (MPI ranks) against PyTorch DDP (gloo), words/s at P = 2 and 4.

The model is Zaremba et al.'s "small" LM (vocabulary 10,000, 2 LSTM layers of 200 units, no dropout,
uniform init 0.1). Every rank trains b = 20 streams x T = 20 steps (400 words) per step; a step is

    forward, cross entropy, backward, the gradient average over ranks, clip_grad_norm 5, SGD(lr=1)

minidl: ``mpiexec -n P`` ranks with ``dist.DistributedOptimizer`` (``--algorithm``, default "auto";
4 MiB fusion buckets allreduced during the backward, ``overlap=True``, as ``--overlap`` trains;
``--no-overlap`` for after it), averaging before the clipping (``opt.synchronize()``), as training's
``--parallel data`` does. Its embedding is ``Embedding(sparse=True)``: the table's gradient (8 MB, of
which a step touches at most 400 rows per rank) is exchanged as its non-zero rows, an allgather, as
Horovod exchanges embedding gradients; "minidl-dense" is the same run allreducing the whole table, as
DDP does. (PyTorch's own ``sparse=True`` gradients cannot go through ``clip_grad_norm_``, which this
recipe needs, so DDP runs dense.) PyTorch: P processes on loopback (MASTER_ADDR=127.0.0.1, env:// init, as
torchrun sets it), ``torch.nn.parallel.DistributedDataParallel`` on the gloo backend (bucketed
allreduce overlapped with the backward). One BLAS / intra-op thread per rank in both.

Words/s = P * 400 / (the slowest rank's median step time). The two frameworks alternate for
``--rounds`` (>= 5) rounds at each P; printed are the median words/s with their spread (min-max),
the ratio of the medians, the per-round ratios and the largest rank's peak RSS.

    python benchmarks/ddp.py                  # P = 2 and 4, both frameworks
    python benchmarks/ddp.py --ranks 2 --rounds 7 --steps 20
    python benchmarks/ddp.py --quick          # a few steps at P = 2 (smoke run)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time

import numpy as np
from harness import SAME_MALLOC, median_spread, peak_rss_mb  # sets the BLAS thread counts (workers inherit them)

from minidl.tools.info import print_header

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VOCAB, HIDDEN, LAYERS, T, B, CLIP = 10_000, 200, 2, 20, 20, 5.0


def _windows(rank: int, n: int) -> np.ndarray:
    """n windows of random token ids [T + 1, B] for this rank (speed does not depend on the values)."""
    return np.random.default_rng(rank).integers(0, VOCAB, size=(n, T + 1, B))


def _report(times: list[float], warmup: int, P: int, rank: int, allreduce_max, impl: str) -> None:
    """Rank 0 prints one JSON line: the slowest rank's median step and the largest peak RSS."""
    step, rss = allreduce_max(float(np.median(times[warmup:]))), allreduce_max(peak_rss_mb())
    if rank == 0:
        print(
            json.dumps(
                {"impl": impl, "P": P, "ms_per_step": 1e3 * step, "words_per_s": P * T * B / step, "peak_rss_mb": rss}
            )
        )


def minidl_worker(args: argparse.Namespace) -> None:
    sys.path.insert(0, ROOT)
    from mpi4py import MPI

    import minidl
    import minidl.distributed as dist
    import minidl.nn.functional as F
    from minidl import optim
    from minidl.models.lm import LSTMLanguageModel

    comm = dist.init(MPI.COMM_WORLD)
    P, rank = dist.size(), dist.rank()
    minidl.manual_seed(0)
    model = LSTMLanguageModel(
        VOCAB, HIDDEN, LAYERS, dropout=0.0, init_scale=0.1, sparse_embedding=not args.dense_embedding
    )
    dist.broadcast_parameters(model)
    opt = dist.DistributedOptimizer(
        optim.SGD(model.parameters(), lr=1.0),
        allreduce=args.algorithm,
        fusion_bytes=int(args.fusion_mb * 2**20),
        overlap=args.overlap,
    )
    state, times = None, []
    for i, window in enumerate(_windows(rank, args.warmup + args.steps)):
        if i == args.warmup:
            comm.Barrier()
        start = time.perf_counter()
        opt.zero_grad()
        logits, state = model(window[:-1], state)
        state = model.detach_state(state)
        F.cross_entropy(logits, window[1:].reshape(-1)).backward()
        opt.synchronize()  # average first, then clip the averaged gradient (what DDP's clipping sees)
        optim.clip_grad_norm(model.parameters(), CLIP)
        opt.step()
        times.append(time.perf_counter() - start)

    def allreduce_max(v: float) -> float:
        buf = np.array([v])
        comm.Allreduce(MPI.IN_PLACE, buf, op=MPI.MAX)  # buffer-based: nothing goes through pickle
        return float(buf[0])

    _report(times, args.warmup, P, rank, allreduce_max, "minidl-dense" if args.dense_embedding else "minidl")


def torch_worker(args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as tdist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method="env://")
    P, rank = tdist.get_world_size(), tdist.get_rank()
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embedding = torch.nn.Embedding(VOCAB, HIDDEN)
            self.lstm = torch.nn.LSTM(HIDDEN, HIDDEN, LAYERS)
            self.decoder = torch.nn.Linear(HIDDEN, VOCAB)
            for p in self.parameters():
                torch.nn.init.uniform_(p, -0.1, 0.1)

        def forward(self, x, state):
            out, state = self.lstm(self.embedding(x), state)
            return self.decoder(out.reshape(-1, HIDDEN)), state

    model = DistributedDataParallel(LM())  # broadcasts rank 0's parameters
    opt = torch.optim.SGD(model.parameters(), lr=1.0)
    data = torch.from_numpy(_windows(rank, args.warmup + args.steps))
    state = (torch.zeros(LAYERS, B, HIDDEN), torch.zeros(LAYERS, B, HIDDEN))
    times = []
    for i in range(len(data)):
        if i == args.warmup:
            tdist.barrier()
        start = time.perf_counter()
        opt.zero_grad()
        state = tuple(s.detach() for s in state)
        logits, state = model(data[i, :-1], state)
        torch.nn.functional.cross_entropy(logits, data[i, 1:].reshape(-1)).backward()  # DDP averages here
        torch.nn.utils.clip_grad_norm_(model.parameters(), CLIP)
        opt.step()
        times.append(time.perf_counter() - start)

    def allreduce_max(v: float) -> float:
        t = torch.tensor([v], dtype=torch.float64)
        tdist.all_reduce(t, op=tdist.ReduceOp.MAX)
        return float(t.item())

    _report(times, args.warmup, P, rank, allreduce_max, "torch")
    tdist.destroy_process_group()
    # Leave without running C++ static destructors: under SAME_MALLOC, a gloo thread torn down at exit
    # aborted 3 of 12 worker processes ("terminate called without an active exception"), after their results.
    sys.stdout.flush()
    os._exit(0)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_argv(impl: str, args: argparse.Namespace) -> list[str]:
    return [sys.executable, os.path.abspath(__file__), "--worker", impl.split("-")[0], "--steps", str(args.steps),
            "--warmup", str(args.warmup), "--algorithm", args.algorithm, "--fusion-mb", str(args.fusion_mb),
            *([] if args.overlap else ["--no-overlap"]),
            *(["--dense-embedding"] if impl == "minidl-dense" else [])]  # fmt: skip


def launch(impl: str, P: int, args: argparse.Namespace) -> dict | None:
    """One job of P ranks; rank 0's JSON line (None, with the output on stderr, if it failed)."""
    argv = _worker_argv(impl, args)
    env = dict(os.environ, **SAME_MALLOC)  # the same glibc malloc thresholds on both sides (harness.py)
    if impl.startswith("minidl"):
        mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
        procs = [
            subprocess.Popen(
                [mpiexec, "-n", str(P), *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
        ]
    else:
        env = dict(env, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()), WORLD_SIZE=str(P))
        procs = [
            subprocess.Popen(
                argv, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
            )
            for r in range(P)
        ]
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=args.timeout))
        except subprocess.TimeoutExpired:
            p.kill()
            outs.append(p.communicate())
    lines = [ln for out, _ in outs for ln in out.splitlines() if ln.startswith("{")]
    if any(p.returncode for p in procs) or not lines:
        sys.stderr.write("".join(o + e for o, e in outs))
        print(f"ddp: {impl} at P={P} failed", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--ranks", default="2,4", help="comma-separated P values")
    ap.add_argument("--rounds", type=int, default=5, help="interleaved rounds per framework and P")
    ap.add_argument("--steps", type=int, default=15, help="timed steps per run (median is taken)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--algorithm", default="auto", help="minidl's allreduce (DistributedOptimizer's allreduce=)")
    ap.add_argument("--fusion-mb", type=float, default=4.0, help="minidl's gradient MiB per allreduce bucket")
    ap.add_argument(
        "--no-overlap", dest="overlap", action="store_false", help="minidl allreduces after the backward, not during"
    )
    ap.add_argument("--dense-embedding", action="store_true", help=argparse.SUPPRESS)  # the minidl-dense worker
    ap.add_argument("--timeout", type=float, default=900)
    ap.add_argument("--quick", action="store_true", help="P = 2, 3 steps, 1 round (smoke run)")
    ap.add_argument("--worker", choices=["minidl", "torch"], help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        (minidl_worker if args.worker == "minidl" else torch_worker)(args)
        return
    print_header(quick=args.quick)
    if args.quick or os.environ.get("MINIDL_QUICK") == "1":
        args.ranks, args.rounds, args.steps, args.warmup = "2", 1, 3, 1
    try:
        import torch.distributed  # noqa: F401

        impls = ["minidl", "minidl-dense", "torch"]
    except ImportError:
        impls = ["minidl", "minidl-dense"]
        print("PyTorch not installed: timing minidl only")
    print(
        f"LSTM LM data-parallel (vocab {VOCAB}, {LAYERS}x{HIDDEN}, T={T}, b={B} per rank, clip {CLIP}); "
        f"minidl allreduce={args.algorithm}, {args.fusion_mb:g} MiB buckets, "
        f"{'overlapped with the backward' if args.overlap else 'after the backward'}, "
        "embedding gradient by rows (minidl-dense: the whole table, as DDP) "
        f"vs PyTorch DDP (gloo, loopback); median of {args.steps} steps per run, "
        f"{args.rounds} interleaved rounds, 1 thread per rank"
    )
    for P in (int(p) for p in args.ranks.split(",")):
        rounds = [{impl: launch(impl, P, args) for impl in impls} for _ in range(args.rounds)]
        print(f"P = {P}:")
        for impl in impls:
            rs = [r[impl] for r in rounds if r[impl]]
            if rs:
                rss = max(r["peak_rss_mb"] for r in rs)
                print(
                    f"  {impl:>12}: {median_spread([r['words_per_s'] for r in rs])} words/s, "
                    f"peak RSS {rss:,.0f} MB per rank"
                )
        for impl in impls[:2]:
            both = [
                (r[impl]["words_per_s"], r["torch"]["words_per_s"]) for r in rounds if r.get(impl) and r.get("torch")
            ]
            if both:
                ratio = float(np.median([a for a, _ in both]) / np.median([b for _, b in both]))
                per = sorted(a / b for a, b in both)
                target = f"; target >= {1.2 if P <= 2 else 1.0}x" if impl == "minidl" else ""
                print(f"  ratio {impl} / DDP: {ratio:.2f}x words/s (per round {per[0]:.2f}-{per[-1]:.2f}x{target})")


if __name__ == "__main__":
    main()
