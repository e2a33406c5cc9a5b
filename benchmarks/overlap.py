"""The exposed-communication share of a data-parallel step, with and without ``--overlap``, from real mpiexec runs.

Horovod and PyTorch DDP start each gradient bucket's allreduce as soon as its gradients are ready, while the
backward pass goes on; what the step still waits for is the *exposed* communication. Each run here is

    mpiexec -n P python -m minidl.train lm|cnn --quick --parallel data [--overlap] --timeline FILE --max-steps N

and the share is read from its trace (``minidl.distributed.timeline.load``): the time during which an allreduce (on
any thread) or a ``wait`` runs while the main thread is not in the forward or backward, over the time from
each step's forward start to its update's end; steps after the first, all ranks together. Buckets of
``--fusion-mb`` 0.1 MiB (the quick models' gradients are well under the default 64 MiB: one bucket, ready only
when the backward ends, could not overlap anything). Settings
are interleaved (repeat 1 of every setting, then repeat 2, ...); medians of the repeats with [min-max].

    python benchmarks/overlap.py [--ranks 2,3,4] [--repeats 5] [--steps 12] [--models lm,cnn] [--quick]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

from minidl.distributed.timeline import load  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402

COMPUTE = ("forward", "backward")  # main-thread compute spans (the update span may hold the synchronize)


def merged(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """The union of intervals, as disjoint sorted intervals."""
    out: list[tuple[float, float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def exposed_share(events: list[dict]) -> tuple[float, float]:
    """(exposed communication / step time, mean step time in ms) over steps after the first, all ranks.

    Exposed: the time in a step during which some allreduce (on any thread) or a ``wait`` runs while the main
    thread is not in the forward or the backward: communication the step had to sit through."""
    exposed = total = 0.0
    steps = 0
    for rank in sorted({e["pid"] for e in events}):
        mine = [e for e in events if e["pid"] == rank]
        main = sorted((e for e in mine if e["tid"] == 0), key=lambda e: e["ts"])
        starts = [e["ts"] for e in main if e["name"] == "forward"]
        ends = [e["ts"] + e["dur"] for e in main if e["name"] == "update"]
        for begin, end in list(zip(starts, ends))[1:]:
            comm = [(max(e["ts"], begin), min(e["ts"] + e["dur"], end)) for e in mine if is_comm(e)]
            union = merged([(a, b) for a, b in comm if b > a])
            busy = [(e["ts"], e["ts"] + e["dur"]) for e in main if e["name"] in COMPUTE and begin <= e["ts"] < end]
            hidden = sum(max(0.0, min(b, d) - max(a, c)) for a, b in union for c, d in busy)
            exposed += sum(b - a for a, b in union) - hidden
            total, steps = total + end - begin, steps + 1
    if steps == 0:
        raise ValueError("the trace holds fewer than 2 complete steps")
    return exposed / total, total / steps / 1e3


def is_comm(e: dict) -> bool:
    return e["name"] == "wait" or e["name"].startswith("allreduce")


def run(
    model: str, ranks: int, overlap: bool, steps: int, fusion: str, launcher: str, workdir: str
) -> tuple[float, float]:
    trace = os.path.join(workdir, f"{model}-{ranks}-{overlap}.json")
    command = [launcher, "-n", str(ranks), sys.executable, "-m", "minidl.train", model, "--quick", "--parallel"]
    command += ["data", "--timeline", trace, "--max-steps", str(steps), "--log-every", "100000", "--fusion-mb", fusion]
    command += ["--overlap"] if overlap else []
    env = dict(os.environ, PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=ROOT, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}):\n{done.stderr[-2000:]}")
    return exposed_share(load(trace))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ranks", default="2,3,4")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--models", default="lm,cnn")
    parser.add_argument("--fusion-mb", default="0.1", help="bucket size (MiB): several buckets, so some can overlap")
    parser.add_argument("--quick", action="store_true", help="p = 2, the LM, 5 repeats of 6 steps")
    args = parser.parse_args()
    print_header(quick=args.quick)
    if args.quick:
        args.ranks, args.models, args.steps = "2", "lm", 6
    launcher = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
    if launcher is None:
        raise SystemExit("benchmarks/overlap.py needs mpiexec (pip install mpich)")
    settings = [(m, int(p), o) for m in args.models.split(",") for p in args.ranks.split(",") for o in (False, True)]
    results: dict[tuple, list[tuple[float, float]]] = {s: [] for s in settings}
    with tempfile.TemporaryDirectory() as workdir:
        for _ in range(args.repeats):  # interleaved: every setting once per repeat
            for s in settings:
                results[s].append(run(*s, args.steps, args.fusion_mb, launcher, workdir))
    print(f"exposed communication / step time, buckets of {args.fusion_mb} MiB, {args.repeats} interleaved repeats,")
    print("median [min-max]; step ms median")
    print(f"{'model':>5} {'P':>2} {'without --overlap':>24} {'with --overlap':>24} {'step ms':>16}")
    for m in args.models.split(","):
        for p in args.ranks.split(","):
            cells, times = [], []
            for o in (False, True):
                share = np.array([100 * r[0] for r in results[m, int(p), o]])
                times.append(np.median([r[1] for r in results[m, int(p), o]]))
                cells.append(f"{np.median(share):5.1f}% [{share.min():4.1f}-{share.max():4.1f}]")
            print(f"{m:>5} {p:>2} {cells[0]:>24} {cells[1]:>24} {times[0]:7.1f} -> {times[1]:6.1f}")
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"peak memory of the largest finished child process: {peak:.0f} MiB")


if __name__ == "__main__":
    main()
