"""Allreduce benchmark, nccl-tests/OSU style: ``mpiexec -n P python -m collectives.bench``.

For each message size and algorithm: the median over repeats of the slowest rank's time per call, the
algorithm bandwidth (size / time), the bus bandwidth (algbw * 2 (p - 1) / p, what each link carries
in a bandwidth-optimal allreduce, so numbers compare across p), the number of elements that differ
from MPI.Allreduce's result (#wrong; the data are small integers, so every summation order is
exact), the time relative to MPI.Allreduce (xMPI: the ratio of the medians; paired: the median and
interquartile range of the per-repeat ratios, each repeat timing both calls one after the other),
and the cost model's prediction (agreement check included). The "mpi" row is MPI's own Allreduce
into a new array (np.empty_like, as every allreduce here returns a new array), the yardstick.

As OSU's latency tests do, one timing is a loop of back-to-back calls (16 at 1-4 KiB, one from
64 KiB up: ``calls_per_timing``) after a barrier, so that a call of a few microseconds is not lost
in the barrier's skew between ranks, and the repeats (200 for short messages) take turns in a
shuffled order.

    mpiexec -n 4 python -m collectives.bench --sizes 1K,1M,16M --algorithms auto,ring --json
    mpiexec -n 2 python -m collectives.bench --torch-gloo     # + torch.distributed's gloo all_reduce column
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from typing import Any, NoReturn

import numpy as np

import collectives
from collectives import cost
from collectives.agreement import INLINE
from collectives.bench_plan import DEFAULT_BUDGET_S, EXIT_INTERRUPTED, Budget, describe, free_memory, machine_sizes
from collectives.paths import unwritable

UNITS = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
DEFAULT_PLOT = os.path.join("runs", "allreduce_bench.png")  # under runs/, not beside the sources


def parse_size(text: str) -> int:
    """Bytes from ``1K``, ``4M``, ``1.5G``, ``64KiB``, ``4096``; ValueError for anything else."""
    text = text.strip().upper().removesuffix("B").removesuffix("I")
    unit = text[-1] if text and text[-1] in UNITS else ""
    value = float(text[: len(text) - len(unit)])
    if not np.isfinite(value):
        raise ValueError(text)
    return int(value * UNITS[unit])


DTYPES = ("float32", "float64", "int32", "int64")  # what MPI and every algorithm sum exactly here (small integers)
SLACK = 3  # working copies an allreduce may hold beside its input and result (receive buffers, a partial sum)


def usage_problem(args: argparse.Namespace) -> str | None:
    """The first bad flag, in one line (the same on every rank: checked before any message), or None."""
    if args.dtype not in DTYPES:
        return f"--dtype {args.dtype!r}: expected one of {', '.join(DTYPES)}"
    if args.repeats is not None and args.repeats < 1:
        return f"--repeats {args.repeats}: must be >= 1"
    if not (np.isfinite(args.budget) and args.budget > 0):
        return f"--budget {args.budget}: must be a finite number of seconds > 0"
    if args.sizes is not None:
        try:
            sizes = [parse_size(s) for s in args.sizes.split(",")]
        except ValueError:
            return f"--sizes {args.sizes!r}: expected bytes per rank, comma-separated, such as 1K,4M,1G"
        itemsize = np.dtype(args.dtype).itemsize
        if any(n < itemsize or n % itemsize for n in sizes):
            return f"--sizes {args.sizes!r}: each size must be a positive multiple of {itemsize} bytes ({args.dtype})"
    if args.plot is not None and (problem := unwritable(args.plot)) is not None:
        return f"--plot {args.plot}: {problem}"
    return None


def memory_problem(comm: Any, sizes: list[int], algorithms: list[str]) -> str | None:
    """Whether the largest size fits in this node's free memory: every rank on it holds its input, a result per
    algorithm and MPI's, and a few working copies. The answer is agreed on (nodes may differ), else None."""
    from mpi4py import MPI

    local = comm.Split_type(MPI.COMM_TYPE_SHARED)
    ranks_here = local.Get_size()
    local.Free()
    largest, copies = max(sizes), 2 + len(algorithms) + SLACK
    need, free = ranks_here * copies * largest, free_memory()
    mine = np.array([need > free], dtype=np.int64)
    comm.Allreduce(MPI.IN_PLACE, mine, op=MPI.MAX)
    if not mine[0]:
        return None
    return (
        f"--sizes: {human(largest)} per rank needs about {need / 2**30:.1f} GiB on a node ({ranks_here} ranks x "
        f"{copies} arrays: the input, MPI's and {len(algorithms)} algorithms' results, {SLACK} working copies), more "
        f"than the {free / 2**30:.1f} GiB available; give smaller --sizes (or fewer --algorithms)"
    )


def refuse(rank: int, problem: str) -> NoReturn:
    """Print ``problem`` once (rank 0) as one usage line and exit 2 (every rank calls this alike)."""
    if rank == 0:
        print(f"python -m collectives.bench: error: {problem}", file=sys.stderr, flush=True)
    raise SystemExit(2)


def human(nbytes: int) -> str:
    for unit in ("G", "M", "K"):
        if nbytes >= UNITS[unit] and nbytes % UNITS[unit] == 0:
            return f"{nbytes // UNITS[unit]}{unit}"
    return str(nbytes)


def calls_per_timing(nbytes: int) -> int:
    """How many back-to-back calls one timing spans: 16 up to 4 KiB, 4 at 16 KiB, one from 64 KiB up.

    Enough that a call of a few microseconds is not lost in the barrier's skew between ranks and the
    timer (a single call after a barrier moved the ratios to MPI toward 1: 0.82-0.91 where 4 or 16
    calls gave 0.72-0.76), few enough that a timing (under 0.1 ms) is seldom cut by another process on
    a shared machine (loops of 100 calls at 1 KiB spread from 0.28x to 0.86x in one run).
    """
    return int(np.clip((64 << 10) // max(nbytes, 1), 1, 16))


def default_repeats(nbytes: int) -> int:
    """Timed repeats for a size: 15+ (medians of 5 were noise), 200 for short messages."""
    return int(np.clip(3e8 / max(nbytes, 1), 15, 200))


def time_calls(comm, calls: dict, repeats: int, number: int = 1, stop: Any = None) -> tuple[dict, dict, dict]:
    """Each call's time (seconds), its time relative to the first call's, and its last result.

    One timing is ``number`` back-to-back calls after a barrier, divided by ``number``; its time is
    the slowest rank's. The calls take turns within every repeat, in an order shuffled per repeat
    (the same on every rank), so that load from other processes (this is a shared machine) and
    whatever one call leaves behind for the next fall on all of them alike. Returned: the median
    over repeats of each call's time; the (median, 25th, 75th percentile) over repeats of its time
    divided by the first call's in the same repeat (paired ratios, which a change of load moves
    less than the times); and the results of a warm-up round of ``max(number, 3)`` calls each.
    With ``stop`` (a ``Budget``), the repeats end early, after the same repeat on every rank, when its time is
    spent or a rank got Ctrl-C (at least ``MIN_REPEATS`` first, unless interrupted).
    """
    from mpi4py import MPI

    results = {}
    for name, call in calls.items():  # warm up: allocations, first touch, connections, plans
        for _ in range(max(number, 3)):
            results[name] = call()
    times = np.empty((len(calls), repeats))
    funcs = list(calls.values())
    loop = range(number)
    for i in range(repeats):
        for j in np.random.default_rng(i).permutation(len(funcs)):
            call = funcs[j]
            comm.Barrier()
            t0 = time.perf_counter()
            for _ in loop:
                call()
            times[j, i] = (time.perf_counter() - t0) / number
        if stop is not None and stop.agreed(comm, repeats_done=i + 1):
            times = np.ascontiguousarray(times[:, : i + 1])
            break
    comm.Allreduce(MPI.IN_PLACE, times, op=MPI.MAX)
    ratios = times / times[0]
    medians = {name: float(np.median(times[j])) for j, name in enumerate(calls)}
    paired = {name: tuple(float(q) for q in np.percentile(ratios[j], [50, 25, 75])) for j, name in enumerate(calls)}
    return medians, paired, results


def _predicted(chosen: str, p: int, nbytes: int, check: bool) -> float | None:
    """The cost model's time of one call (None for MPI's own), the agreement check's round included."""
    if chosen == "mpi":
        return None
    predicted = cost.predict(chosen, p, nbytes)
    if check and p > 1 and (chosen != "recursive_doubling" or nbytes > INLINE):
        predicted += cost.predict_check(p)  # short recursive doubling is its own check
    return predicted


def run(
    comm,
    sizes: list[int],
    algorithms: list[str],
    dtype: np.dtype,
    check: bool = True,
    repeats: int | None = None,
    echo: bool = True,
    gloo: dict[int, float] | None = None,
    budget: Budget | None = None,
) -> list[dict]:
    """Benchmark rows (dicts) for every size and algorithm; rank 0 prints each row as it comes when ``echo``.
    With a ``budget``, each size gets an equal share of its time, and a Ctrl-C ends the run after a repeat."""
    from mpi4py import MPI

    p, rank = comm.Get_size(), comm.Get_rank()
    rows = []
    for k, nbytes in enumerate(sizes):
        if budget is not None:
            budget.start_size(len(sizes) - k)
            if budget.interrupted:
                break
        count = nbytes // dtype.itemsize
        x = np.random.default_rng([count, rank]).integers(-8, 8, count).astype(dtype)
        reps, number = repeats or default_repeats(nbytes), calls_per_timing(nbytes)

        calls = _calls(comm, x, algorithms, check)
        times, paired, results = time_calls(comm, calls, reps, number, budget)
        reps = budget.repeats_done if budget is not None else reps
        for name in calls:
            t, out = times[name], results[name]
            chosen = collectives.choose_algorithm(p, x.nbytes)[0] if name == "auto" else name
            wrong = np.array([np.count_nonzero(out != results["mpi"])], dtype=np.int64)
            comm.Allreduce(MPI.IN_PLACE, wrong, op=MPI.SUM)
            predicted = _predicted(chosen, p, x.nbytes, check)
            algbw = x.nbytes / t / 1e9 if t > 0 else 0.0
            rows.append(
                {
                    "p": p,
                    "size": x.nbytes,
                    "count": count,
                    "dtype": dtype.name,
                    "algorithm": name if name != "auto" else f"auto({chosen})",
                    "time_us": t * 1e6,
                    "algbw_GBps": algbw,
                    "busbw_GBps": algbw * 2 * (p - 1) / p,
                    "wrong": int(wrong[0]),
                    "x_mpi_time": t / times["mpi"] if times["mpi"] > 0 else float("nan"),
                    "x_mpi_paired": paired[name],  # per-repeat time / MPI's: (median, 25th, 75th percentile)
                    "predicted_us": None if predicted is None else predicted * 1e6,
                    "repeats": reps,
                    "calls_per_timing": number,
                }
            )
            if gloo and name == "mpi" and nbytes in gloo:  # the torch-gloo column, on MPI's own row
                rows[-1]["gloo_us"] = gloo[nbytes] * 1e6
            if rank == 0 and echo:
                print(format_row(rows[-1]), flush=True)
    return rows


def _calls(comm, x: np.ndarray, algorithms: list[str], check: bool) -> dict[str, Any]:
    """The calls timed at one size: MPI's own Allreduce into a new array (the yardstick), then each algorithm."""
    from mpi4py import MPI

    def mpi_call():
        out = np.empty_like(x)
        comm.Allreduce(x, out, op=MPI.SUM)
        return out

    calls: dict[str, Any] = {"mpi": mpi_call}
    for name in algorithms:
        calls[name] = lambda name=name: collectives.allreduce(comm, x, algorithm=name, check=check)
    return calls


HEADER = (
    f"{'size':>8} {'count':>10} {'dtype':>8} {'algorithm':>28} {'time(us)':>11} {'algbw':>7} {'busbw':>7} "
    f"{'#wrong':>6} {'xMPI':>6} {'paired(IQR)':>17} {'model(us)':>10}"
)


def format_row(r: dict) -> str:
    model = f"{r['predicted_us']:10.1f}" if r["predicted_us"] is not None else f"{'-':>10}"
    paired = "{:.2f} ({:.2f}-{:.2f})".format(*r["x_mpi_paired"]) if r["algorithm"] != "mpi" else "-"
    return (
        f"{human(r['size']):>8} {r['count']:>10} {r['dtype']:>8} {r['algorithm']:>28} {r['time_us']:11.1f} "
        f"{r['algbw_GBps']:7.2f} {r['busbw_GBps']:7.2f} {r['wrong']:>6} {r['x_mpi_time']:6.2f} {paired:>17} {model}"
        + (f"  torch gloo {r['gloo_us']:.1f} us = {r['gloo_us'] / r['time_us']:.2f}x MPI" if "gloo_us" in r else "")
    )


# ----------------------------------------------------------------------------- the torch-gloo column
def gloo_worker(sizes: list[int], dtype: np.dtype, repeats: int | None) -> dict:
    """One rank of a torch.distributed gloo group (env:// on loopback): median over repeats of the slowest
    rank's all_reduce time per size; rank 0 prints {size: seconds} as JSON."""
    import torch
    import torch.distributed as tdist

    torch.set_num_threads(1)
    tdist.init_process_group("gloo", init_method="env://")
    medians = {}
    for nbytes in sizes:
        x = torch.ones(nbytes // dtype.itemsize, dtype=getattr(torch, dtype.name))
        reps, number = repeats or default_repeats(nbytes), calls_per_timing(nbytes)
        for _ in range(max(number, 3)):
            tdist.all_reduce(x)  # warm up: connections, first touch
        times = torch.empty(reps, dtype=torch.float64)
        for i in range(reps):
            tdist.barrier()
            t0 = time.perf_counter()
            for _ in range(number):
                tdist.all_reduce(x)
            times[i] = (time.perf_counter() - t0) / number
        tdist.all_reduce(times, op=tdist.ReduceOp.MAX)
        medians[nbytes] = float(times.median())
    if tdist.get_rank() == 0:
        print(json.dumps(medians), flush=True)
    tdist.destroy_process_group()
    return medians


def gloo_times(comm, args) -> dict[int, float]:
    """Rank 0 runs a gloo group of p processes (loopback) over the sizes while the MPI ranks wait without
    spinning; every rank gets {size: seconds} ({} when torch is missing or the group failed)."""
    import os
    import socket
    import subprocess

    result: dict[int, float] = {}
    if comm.Get_rank() == 0:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        p = comm.Get_size()
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PMI", "HYDRA", "MPIR", "MPI_"))}
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE=str(p))  # not MPI ranks themselves
        cmd = [sys.executable, "-m", "collectives.bench", "--gloo-worker", "--sizes", args.sizes, "--dtype", args.dtype]
        cmd += ["--repeats", str(args.repeats)] if args.repeats else []
        procs = [subprocess.Popen(cmd, env=dict(env, RANK=str(r)), stdout=subprocess.PIPE, text=True) for r in range(p)]
        outs = [proc.communicate(timeout=1800)[0] for proc in procs]
        if all(proc.returncode == 0 for proc in procs) and outs[0].strip():
            result = {int(k): v for k, v in json.loads(outs[0].strip().splitlines()[-1]).items()}
        else:
            print("# torch gloo column skipped: the gloo group failed (is torch installed?)", flush=True)
    req = comm.Ibarrier()
    while not req.Test():  # the other ranks sleep here instead of spinning in a blocking call
        time.sleep(0.01)
    sizes = np.array(sorted(result.items()) if result else [], dtype=np.float64).reshape(-1, 2)
    n = np.array([len(sizes)])
    comm.Bcast(n, root=0)
    buf = sizes if comm.Get_rank() == 0 else np.empty((int(n[0]), 2))
    comm.Bcast(buf, root=0)
    return {int(k): float(v) for k, v in buf}


def plot(rows: list[dict], path: str) -> None:
    import matplotlib.pyplot as plt

    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)

    fig, (ax_t, ax_bw) = plt.subplots(1, 2, figsize=(12, 4.5))
    names = sorted({r["algorithm"].split("(")[0] for r in rows}, key=lambda n: (n != "mpi", n))
    for name in names:
        mine = [r for r in rows if r["algorithm"].split("(")[0] == name]
        sizes = [r["size"] for r in mine]
        (line,) = ax_t.loglog(sizes, [r["time_us"] for r in mine], "o-", label=name)
        if mine[0]["predicted_us"] is not None:
            ax_t.loglog(sizes, [r["predicted_us"] for r in mine], "--", color=line.get_color(), alpha=0.6)
        ax_bw.semilogx(sizes, [r["busbw_GBps"] for r in mine], "o-", label=name)
    p = rows[0]["p"]
    ax_t.set(xlabel="bytes per rank", ylabel="time (us)", title=f"allreduce, p = {p} (dashed: cost model)")
    ax_bw.set(xlabel="bytes per rank", ylabel="bus bandwidth (GB/s)", title="busbw = algbw * 2(p-1)/p")
    ax_t.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _parser() -> argparse.ArgumentParser:
    """The command line of ``python -m collectives.bench``."""
    parser = argparse.ArgumentParser(prog="python -m collectives.bench", description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", help="bytes per rank, comma-separated (1K, 4M, ...; default: from the machine)")
    parser.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S, help="seconds in all, shared by the sizes")
    parser.add_argument(
        "--algorithms",
        default="auto," + ",".join(collectives.ALGORITHMS),
        help="comma-separated, beside MPI's own Allreduce (the mpi row, always measured)",
    )
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--repeats", type=int, default=None, help="timed repeats per size (default: by size)")
    parser.add_argument("--no-check", action="store_true", help="skip the agreement check (check=False)")
    parser.add_argument("--no-calibrate", action="store_true", help="use the built-in cost parameters for auto")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON (rank 0)")
    parser.add_argument("--plot", metavar="PNG", nargs="?", const=DEFAULT_PLOT, help=f"save a figure ({DEFAULT_PLOT})")
    parser.add_argument("--torch-gloo", action="store_true", help="add torch.distributed gloo's all_reduce time")
    parser.add_argument("--gloo-worker", action="store_true", help=argparse.SUPPRESS)
    return parser


def main(argv: list[str] | None = None) -> list[dict] | dict:
    from mpi4py import MPI

    parser = _parser()
    args = parser.parse_args(argv)
    known = ("auto", *collectives.ALGORITHMS)
    algorithms = [a.strip() for a in args.algorithms.split(",") if a.strip() and a.strip() != "mpi"]
    unknown = [a for a in algorithms if a not in known]
    if unknown:  # every rank parses the same flags: each stops here, before any message
        parser.error(f"--algorithms: unknown {', '.join(map(repr, unknown))}: expected mpi or {', '.join(known)}")
    comm = MPI.COMM_WORLD
    problem = usage_problem(args)
    if problem is not None:
        refuse(comm.Get_rank(), problem)
    if args.gloo_worker:
        return gloo_worker([parse_size(s) for s in args.sizes.split(",")], np.dtype(args.dtype), args.repeats)
    rank, p = comm.Get_rank(), comm.Get_size()
    dtype = np.dtype(args.dtype)
    cores = os.cpu_count() or 1
    sizes = [parse_size(s) for s in args.sizes.split(",")] if args.sizes else machine_sizes(p, cores, free_memory())
    if args.sizes and (problem := memory_problem(comm, sizes, algorithms)) is not None:
        refuse(rank, problem)
    args.sizes = ",".join(str(n) for n in sizes)  # what the gloo column's workers measure too
    budget = Budget(args.budget)
    comm.Barrier()  # every rank has its Ctrl-C handler before the plan says Ctrl-C stops it
    if rank == 0:  # the plan first (on stderr under --json, so that stdout stays one JSON document)
        print(describe(p, cores, sizes, args.budget, human), file=sys.stderr if args.json else sys.stdout, flush=True)
    params = cost.get_params() if args.no_calibrate else cost.calibrate(comm)
    if rank == 0 and not args.json:
        print(
            f"# allreduce benchmark: p = {p}, dtype {dtype.name}, check={'off' if args.no_check else 'on'}; "
            f"cost model alpha = {params.alpha * 1e6:.2f} us, beta = {params.beta * 1e9:.3f} ns/B, "
            f"gamma = {params.gamma * 1e9:.3f} ns/B ({'built-in' if args.no_calibrate else 'calibrated'})"
        )
        print(
            "# algbw, busbw in GB/s; xMPI = time / MPI.Allreduce time; paired = median (IQR) of per-repeat ratios; "
            "model = cost-model prediction"
        )
        print(HEADER, flush=True)
    gloo = gloo_times(comm, args) if args.torch_gloo else {}
    rows = run(comm, sizes, algorithms, dtype, not args.no_check, args.repeats, not args.json, gloo, budget)
    if rank == 0:
        if args.json:
            json.dump({"p": p, "params": params.__dict__, "rows": rows}, sys.stdout, indent=1)
            print()
        if args.plot:
            plot(rows, args.plot)
            if not args.json:
                print(f"# figure saved to {args.plot}")
    if budget.interrupted:
        done = len({r["size"] for r in rows})
        if rank == 0:
            print(f"# interrupted (Ctrl-C): {done} of {len(sizes)} sizes measured", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_INTERRUPTED)
    return rows


if __name__ == "__main__":
    main()
