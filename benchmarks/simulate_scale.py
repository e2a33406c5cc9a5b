"""The virtual-time cluster: how fast it simulates at scale, and how well it predicts real runs here.

    python benchmarks/simulate_scale.py                    # both parts (a few minutes on 2 cores)
    python benchmarks/simulate_scale.py --skip-measured    # scale figures only

1. Scale: one 100 MiB ring allreduce simulated at p = 1024 and 4096 on a named network, and at
   p = 256 with both engines (the event engine, replay.py, and the rounds engine, rounds.py); rings
   whose blocks do not split evenly (10^8 and 4 x 10^8 bytes at p = 1000 and 1024: issue 23's
   targets, under 3 s); and a training step at p = 1024 (a ResNet-50-sized gradient in 64 MiB
   buckets, ring and auto; target under 2 s): the virtual time, the wall and CPU seconds of the
   simulation (tracing included, nothing cached: each run is a fresh process) and its peak memory.
   Medians of --repeats interleaved runs, min-max.
2. Predicted against measured: for P = 2..5 ranks under mpiexec, calibrate alpha, beta, gamma
   (cost.calibrate), measure every allreduce from 1 KiB to 16 MiB as collectives.bench does
   (median of interleaved repeats, agreement check on), and replay the same call on "crossbar"
   with the calibrated parameters. Prints measured / simulated per size and algorithm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.harness import peak_rss_mb  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402

MIB = 1 << 20
SCALE_RUNS = [(256, "events"), (256, "rounds"), (1024, "rounds"), (4096, "rounds")]
UNEVEN_RUNS = [(1024, 10**8), (1024, 4 * 10**8), (1000, 4 * 10**8)]  # (p, bytes): blocks of unequal sizes
STEP_RUNS = [(1024, "ring"), (1024, "auto")]  # (ranks, allreduce) of a training step


# -- children --------------------------------------------------------------------------------------
def child_scale(p: int, engine: str, network: str, nbytes: int) -> None:
    import collectives

    t0, c0 = time.perf_counter(), time.process_time()
    virtual = collectives.allreduce_time("ring", p, nbytes, network, engine=engine)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(
        json.dumps(
            {"p": p, "engine": engine, "virtual_s": virtual, "wall_s": wall, "cpu_s": cpu, "peak_mb": peak_rss_mb()}
        )
    )


def child_step(p: int, algorithm: str, network: str) -> None:
    from minidl.simulate import described, scaling

    profile = described(25.6e6, 100.0, 32, fusion_bytes=64 * MIB)  # ResNet-50's gradient, Horovod's buckets
    t0, c0 = time.perf_counter(), time.process_time()
    (row,) = scaling(profile, [p], algorithm, network)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    print(json.dumps({"virtual_s": row.step_s, "wall_s": wall, "cpu_s": cpu, "peak_mb": peak_rss_mb()}))


def child_measure(sizes: list[int], repeats: int | None) -> None:
    from mpi4py import MPI

    import collectives
    from collectives import bench, cost

    comm = MPI.COMM_WORLD
    params = cost.calibrate(comm)
    rows = bench.run(comm, sizes, list(collectives.ALGORITHMS), np.dtype(np.float32), True, repeats, echo=False)
    if comm.Get_rank() == 0:
        print(json.dumps({"params": [params.alpha, params.beta, params.gamma], "rows": rows}))


# -- the parent ------------------------------------------------------------------------------------
def run_child(argv: list[str], mpi: int = 0) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", *argv]
    if mpi:
        cmd = [os.path.join(os.path.dirname(sys.executable), "mpiexec"), "-n", str(mpi), *cmd]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
    if out.returncode != 0:
        sys.stderr.write(out.stderr)
        raise RuntimeError(f"child {' '.join(argv)} failed (exit {out.returncode})")
    return json.loads(out.stdout.strip().splitlines()[-1])


def spread(values: list[float]) -> str:
    return f"{np.median(values):8.2f} [{min(values):.2f}-{max(values):.2f}]"


def scale(args: argparse.Namespace) -> None:
    print(
        f"== 1. a {args.mib} MiB ring allreduce on {args.network}: simulation cost "
        f"(median [min-max] of {args.repeats} interleaved runs, each a fresh process)"
    )
    results: dict[tuple, list[dict]] = {run: [] for run in SCALE_RUNS}
    for _ in range(args.repeats):
        for p, engine in SCALE_RUNS:
            results[(p, engine)].append(run_child(["scale", str(p), engine, args.network, str(args.mib * MIB)]))
    print(f"{'p':>6} {'engine':>7} {'virtual s':>10} {'wall s':>22} {'CPU s':>22} {'peak MB':>8}")
    for (p, engine), runs in results.items():
        virtual = runs[0]["virtual_s"]
        assert all(r["virtual_s"] == virtual for r in runs)
        print(
            f"{p:>6} {engine:>7} {virtual:10.5f} {spread([r['wall_s'] for r in runs]):>22} "
            f"{spread([r['cpu_s'] for r in runs]):>22} {max(r['peak_mb'] for r in runs):8.0f}"
        )
    a, b = results[(256, "events")][0]["virtual_s"], results[(256, "rounds")][0]["virtual_s"]
    print(f"p=256: rounds / events virtual time = {b / a:.12f} (the two engines agree)\n")
    targets(args)


def targets(args: argparse.Namespace) -> None:
    """Issue 23's targets: uneven rings at p ~ 1000 in under 3 s, a training step at p = 1024 in under 2 s."""
    runs = [("scale", str(p), "auto", args.network, str(n)) for p, n in UNEVEN_RUNS]
    runs += [("step", str(p), algorithm, args.network) for p, algorithm in STEP_RUNS]
    results: dict[tuple, list[dict]] = {run: [] for run in runs}
    for _ in range(args.repeats):
        for run in runs:
            results[run].append(run_child(list(run)))
    print(f"== issue 23's targets on {args.network} (median [min-max] of {args.repeats}, fresh processes)")
    print(f"{'what':<36} {'virtual s':>10} {'wall s':>22} {'CPU s':>22} {'peak MB':>8}")
    for run, got in results.items():
        what = f"ring, p={run[1]}, {int(run[4]):,} B" if run[0] == "scale" else f"step, p={run[1]}, {run[2]}"
        print(
            f"{what:<36} {got[0]['virtual_s']:10.5f} {spread([r['wall_s'] for r in got]):>22} "
            f"{spread([r['cpu_s'] for r in got]):>22} {max(r['peak_mb'] for r in got):8.0f}"
        )
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")


def measured(args: argparse.Namespace) -> None:
    import collectives
    from collectives import bench, cost

    sizes = [bench.parse_size(s) for s in args.sizes.split(",")]
    print(f"== 2. measured / simulated (crossbar, calibrated alpha beta gamma, agreement check on), P = {args.ranks}")
    within, total = 0, 0
    for P in [int(x) for x in args.ranks.split(",")]:
        data = run_child(["measure", args.sizes, str(args.bench_repeats or 0)], mpi=P)
        params = cost.CostParams(*data["params"])
        print(
            f"-- P = {P}: alpha {params.alpha * 1e6:.2f} us, beta {params.beta * 1e9:.3f} ns/B, gamma {params.gamma * 1e9:.3f} ns/B"
        )
        print(f"{'size':>8} " + " ".join(f"{a:>19}" for a in collectives.ALGORITHMS))
        table = {(r["size"], r["algorithm"]): r["time_us"] * 1e-6 for r in data["rows"]}
        for size in sizes:
            cells = []
            for algorithm in collectives.ALGORITHMS:
                simulated = collectives.allreduce_time(algorithm, P, size, params=params, check=True)
                ratio = table[(size, algorithm)] / simulated
                if size >= 64 << 10:
                    total += 1
                    within += abs(ratio - 1) <= 0.25
                cells.append(f"{ratio:6.2f} ({simulated * 1e6:9.1f}us)")
            print(f"{bench.human(size):>8} " + " ".join(f"{c:>19}" for c in cells))
    print(f"messages >= 64 KiB within 25% of the simulation: {within} of {total}")


def main() -> None:
    if len(sys.argv) > 2 and sys.argv[1] == "--child":
        kind, rest = sys.argv[2], sys.argv[3:]
        if kind == "scale":
            child_scale(int(rest[0]), rest[1], rest[2], int(rest[3]))
        elif kind == "step":
            child_step(int(rest[0]), rest[1], rest[2])
        else:
            from collectives.bench import parse_size

            child_measure([parse_size(s) for s in rest[0].split(",")], int(rest[1]) or None)
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--network", default="10gbe")
    parser.add_argument("--mib", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranks", default="2,3,4,5")
    parser.add_argument("--sizes", default="1K,4K,16K,64K,256K,1M,4M,16M")
    parser.add_argument("--bench-repeats", type=int, default=None, help="timed repeats per size (default: by size)")
    parser.add_argument("--skip-measured", action="store_true")
    parser.add_argument("--skip-scale", action="store_true")
    args = parser.parse_args()
    print_header()
    if not args.skip_scale:
        scale(args)
    if not args.skip_measured:
        measured(args)


if __name__ == "__main__":
    main()
