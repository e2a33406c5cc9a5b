"""The exposed-communication share of a data-parallel step, with and without ``--overlap``, from real mpiexec runs.

Horovod and PyTorch DDP start each gradient bucket's allreduce as soon as its gradients are ready, while the
backward pass goes on; what the step still waits for is the *exposed* communication. Each run here is

    mpiexec -n P python -m minidl.train lm|cnn --quick --parallel data [--overlap] --timeline FILE --max-steps N

and the share is read from its trace (``minidl.distributed.timeline.load``): on every rank's main thread, the time
in ``wait`` spans (for a bucket's allreduce, or the slowest rank) and in allreduces run on the main thread, over
the time from each step's forward start to its update's end; steps after the first, all ranks together. Settings
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


def exposed_share(events: list[dict]) -> tuple[float, float]:
    """(exposed communication / step time, mean step time in ms) over steps after the first, all ranks."""
    exposed = total = 0.0
    steps = 0
    for rank in sorted({e["pid"] for e in events}):
        main = sorted((e for e in events if e["pid"] == rank and e["tid"] == 0), key=lambda e: e["ts"])
        starts = [e["ts"] for e in main if e["name"] == "forward"]
        ends = [e["ts"] + e["dur"] for e in main if e["name"] == "update"]
        for begin, end in list(zip(starts, ends))[1:]:
            inside = [e for e in main if begin <= e["ts"] < end]
            exposed += sum(e["dur"] for e in inside if e["name"] == "wait" or e["name"].startswith("allreduce"))
            total, steps = total + end - begin, steps + 1
    if steps == 0:
        raise ValueError("the trace holds fewer than 2 complete steps")
    return exposed / total, total / steps / 1e3


def run(model: str, ranks: int, overlap: bool, steps: int, launcher: str, workdir: str) -> tuple[float, float]:
    trace = os.path.join(workdir, f"{model}-{ranks}-{overlap}.json")
    command = [launcher, "-n", str(ranks), sys.executable, "-m", "minidl.train", model, "--quick", "--parallel"]
    command += ["data", "--timeline", trace, "--max-steps", str(steps), "--log-every", "100000"]
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
    parser.add_argument("--quick", action="store_true", help="p = 2, the LM, 5 repeats of 6 steps")
    args = parser.parse_args()
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
                results[s].append(run(*s, args.steps, launcher, workdir))
    print(f"exposed communication / step time, {args.repeats} interleaved repeats, median [min-max]; step ms median")
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
