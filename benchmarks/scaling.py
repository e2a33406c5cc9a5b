"""Data-parallel scaling of the Zaremba-small LSTM LM: words/s at P ranks, per allreduce algorithm.

Weak scaling, as "Deep Learning: massively scaled parallel approach using hybrid supercomputers" (Medium,
2017) measured it: every rank trains batch b = 20 streams x T = 20 steps (400 words)
per step, so P ranks train P * 400 words per step. A step is the whole of training: forward, loss,
backward, gradient allreduce (DistributedOptimizer, one 64 MiB fusion bucket: ~18.6 MB of float32
gradients for the 4.65M parameters), clipping at norm 5, SGD. Reported per P and algorithm:

    words/s (global)   P * 400 / median step time
    words/s per rank   the same / P
    efficiency         words/s(P) / (P * words/s(1)), the single-process run without any wrapper as 1
    compute / wait / comm   the DistributedOptimizer's mean breakdown per step (ms)
    comm-only eff.     t(1) / (t(1) + comm): the efficiency if the only cost of P ranks were the
                       communication - what a machine with a free core per rank approaches. On a
                       shared machine (other jobs on the cores) "compute" at P > 1 grows with the
                       contention, and the measured efficiency falls below this bound.

The script launches ``mpiexec -n P`` itself for each P (``--max-ranks``: 1, 2, 4, ... up to it, plus the
maximum; or ``--ranks 1,2,3``), with one BLAS thread per rank. On a cluster whose launcher is not mpiexec,
run the worker under it directly, once per P: ``srun -n 16 python benchmarks/scaling.py --worker``
(it prints one JSON line per algorithm); the P = 1 baseline is ``python benchmarks/scaling.py --worker``.

    python benchmarks/scaling.py                   # P = 1, 2 (this 2-core machine), every algorithm + MPI's own
    python benchmarks/scaling.py --max-ranks 16    # P = 1, 2, 4, 8, 16 on a bigger machine
    python benchmarks/scaling.py --algorithms ring,mpi --steps 20 --json out.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy loads its BLAS: one core per rank

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGORITHMS = ["ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto", "mpi"]
VOCAB, HIDDEN, LAYERS, T, B = 10_000, 200, 2, 20, 20
sys.path.insert(0, ROOT)
from collectives.paths import check_output  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402
from minidl.tools.measure import peak_rss_mb, spread  # noqa: E402


# ----------------------------------------------------------------------------- the worker (one MPI job)
def worker(args: argparse.Namespace) -> None:
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
    words = T * B
    rng = np.random.default_rng(rank)
    windows = rng.integers(0, VOCAB, size=(args.warmup + args.steps, T + 1, B))
    algorithms = ["none"] if P == 1 else args.algorithms.split(",")
    for algorithm in algorithms:
        model = LSTMLanguageModel(VOCAB, HIDDEN, LAYERS, dropout=0.0, init_scale=0.1)
        dist.broadcast_parameters(model)
        base = optim.SGD(model.parameters(), lr=1.0)
        opt = (
            base
            if algorithm == "none"
            else dist.DistributedOptimizer(base, allreduce=algorithm, compression=args.compression)
        )
        state = None
        times = []
        for i, window in enumerate(windows):
            if i == args.warmup:
                comm.Barrier()
                if algorithm != "none":
                    opt.timings.reset()
            start = time.perf_counter()
            opt.zero_grad()
            logits, state = model(window[:-1], state)
            state = model.detach_state(state)
            F.cross_entropy(logits, window[1:].reshape(-1)).backward()
            if algorithm != "none":
                opt.synchronize()
            optim.clip_grad_norm(model.parameters(), 5.0)
            opt.step()
            times.append(time.perf_counter() - start)
        step = float(np.median(times[args.warmup :]))
        # the slowest rank sets the pace of synchronous training
        if P > 1:  # buffer-based Allreduce: nothing goes through pickle
            slowest = np.array([step])
            comm.Allreduce(MPI.IN_PLACE, slowest, op=MPI.MAX)
            step = float(slowest[0])
        breakdown = opt.timings.mean() if algorithm != "none" else {}
        if rank == 0:
            print(
                json.dumps(
                    {
                        "P": P,
                        "algorithm": algorithm,
                        "compression": args.compression,
                        "ms_per_step": 1e3 * step,
                        "words_per_s": P * words / step,
                        "words_per_s_per_rank": words / step,
                        **{f"{k}_ms": 1e3 * v for k, v in breakdown.items()},
                        "peak_rss_mb": peak_rss_mb(),
                    }
                ),
                flush=True,
            )


# ----------------------------------------------------------------------------- the driver
def rank_counts(max_ranks: int) -> list[int]:
    counts, p = [], 1
    while p < max_ranks:
        counts.append(p)
        p *= 2
    return counts + [max_ranks]


def launch(P: int, args: argparse.Namespace) -> list[dict]:
    mpiexec = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    cmd = [
        sys.executable,
        os.path.abspath(__file__),
        "--worker",
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--algorithms",
        args.algorithms,
    ]
    if args.compression:
        cmd += ["--compression", args.compression]
    if mpiexec:
        cmd = [mpiexec, "-n", str(P)] + cmd
    elif P > 1:
        raise SystemExit("scaling: mpiexec not found; install mpi4py with an MPI (pip install mpich)")
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout)
    if out.returncode != 0:
        sys.stderr.write(out.stdout + out.stderr)
        raise SystemExit(f"scaling: the job with P={P} failed (exit {out.returncode})")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def median_row(rows: list[dict]) -> dict:
    """The run with the median words/s, with the spread of all runs (``min``/``max`` words/s)."""
    rates = [r["words_per_s"] for r in rows]
    med, lo, hi = spread(rates)
    row = dict(min(rows, key=lambda r: abs(r["words_per_s"] - med)))
    return row | {"words_per_s": med, "words_per_s_min": lo, "words_per_s_max": hi, "runs": len(rows)}


def table(rows: list[dict]) -> str:
    base = next((r["words_per_s"] for r in rows if r["P"] == 1), None)
    t1 = next((r["ms_per_step"] for r in rows if r["P"] == 1), None)
    head = (
        f"{'P':>3}  {'algorithm':<19}{'words/s':>9}{'(min-max)':>16}{'per rank':>10}{'effic.':>8}"
        f"{'ms/step':>9}{'compute':>9}{'wait':>7}{'comm':>7}{'comm-only eff.':>16}{'peak MB':>9}"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        eff = f"{100 * r['words_per_s'] / (r['P'] * base):.0f}%" if base else "-"
        parts = "".join(
            f"{r[k]:>{w}.1f}" if k in r else f"{'-':>{w}}"
            for k, w in (("compute_ms", 9), ("wait_ms", 7), ("communication_ms", 7))
        )
        bound = f"{100 * t1 / (t1 + r['communication_ms']):.0f}%" if t1 and "communication_ms" in r else "-"
        rng = f"({r['words_per_s_min']:.0f}-{r['words_per_s_max']:.0f})" if "words_per_s_min" in r else ""
        lines.append(
            f"{r['P']:>3}  {r['algorithm']:<19}{r['words_per_s']:>9.0f}{rng:>16}{r['words_per_s_per_rank']:>10.0f}"
            f"{eff:>8}{r['ms_per_step']:>9.1f}{parts}{bound:>16}{r.get('peak_rss_mb', float('nan')):>9.0f}"
        )
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help="run one measurement job (under mpiexec/srun)")
    ap.add_argument("--max-ranks", type=int, default=2, help="measure P = 1, 2, 4, ... up to this (default 2)")
    ap.add_argument("--ranks", default=None, help="explicit comma-separated rank counts, e.g. 1,2,3")
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--compression", default=None, choices=[None, "fp16"])
    ap.add_argument("--steps", type=int, default=15, help="timed steps per run (median is reported)")
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=5, help="measure every P this many times, interleaved")
    ap.add_argument("--timeout", type=float, default=1800)
    ap.add_argument("--json", default=None, help="also write the rows to this file")
    ap.add_argument("--quick", action="store_true", help="a few steps only (smoke test)")
    ap.add_argument("--from-json", default=None, help="print the table of rows saved with --json, measure nothing")
    args = ap.parse_args()
    check_output("--json", args.json, ap.prog)  # its folder made, before the runs
    if args.quick:
        args.steps, args.warmup = 3, 1
    if args.worker:
        worker(args)
        return
    print_header(quick=args.quick)
    counts = [int(p) for p in args.ranks.split(",")] if args.ranks else rank_counts(args.max_ranks)
    runs: dict[tuple[int, str], list[dict]] = {}
    if args.from_json:
        with open(args.from_json) as f:
            runs = {(r["P"], r["algorithm"]): [r] for r in json.load(f)}
        args.repeats = 0
    for _ in range(args.repeats):
        for P in counts:  # interleaved repeats: a noisy neighbour hits every P alike
            for row in launch(P, args):
                runs.setdefault((row["P"], row["algorithm"]), []).append(row)
    rows = sorted(
        map(median_row, runs.values()),
        key=lambda r: (r["P"], ALGORITHMS.index(r["algorithm"]) if r["algorithm"] in ALGORITHMS else -1),
    )
    print(
        f"Zaremba-small LSTM LM (vocab {VOCAB}, {LAYERS}x{HIDDEN}, T={T}, b={B} per rank), "
        f"weak scaling, compression={args.compression}, "
        + (
            f"rows from {args.from_json}"
            if args.from_json
            else f"median of {args.steps} steps per run, median (min-max) of {args.repeats} interleaved runs"
        )
    )
    print(table(rows))
    for P in sorted({r["P"] for r in rows if r["P"] > 1}):
        top = max((r for r in rows if r["P"] == P), key=lambda r: r["words_per_s"])
        base = next((r["words_per_s"] for r in rows if r["P"] == 1), None)
        if base:
            print(f"P={P}: best algorithm {top['algorithm']}, efficiency {100 * top['words_per_s'] / (P * base):.0f}%")
    if args.from_json:
        return
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
