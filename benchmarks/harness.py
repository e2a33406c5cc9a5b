"""What the framework-vs-framework benchmarks share: each side runs in its own subprocess (so its peak RSS
is its own and its BLAS threads are set before import), steps are timed in wall-clock and CPU seconds, and
the child reports one JSON line.

    result = spawn(__file__, ["--child", "torch", "--steps", "20"])    # parent
    times = time_steps(step, warmup=3, steps=20)                       # child: [(wall_s, cpu_s), ...]
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import time
from collections.abc import Callable

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy / torch load their BLAS

from threadpoolctl import threadpool_limits  # noqa: E402

from minidl.tools import memory  # noqa: E402 (after the thread counts: it loads NumPy)

# The variables reach only BLAS libraries loaded after them: a script that imported NumPy before this module
# (isort puts ``import numpy`` above ``from harness import``) had already started OpenBLAS with one thread per
# core, and ``cnn.py --layers``, which times in its own process, ran minidl's layers on 2 threads while
# counting the CPU time of one. Limit the libraries already loaded as well.
threadpool_limits(1)

# Every child, minidl's and PyTorch's, runs under the glibc malloc thresholds that ``import minidl`` sets
# (minidl/tools/memory.py): the same allocator settings on both sides, so a ratio measures the frameworks' own
# work, not which of them happened to page-fault its freed arrays back in (PyTorch's LM step gains 20-25%).
SAME_MALLOC = {
    "MALLOC_MMAP_THRESHOLD_": str(memory.MMAP_THRESHOLD),
    "MALLOC_TRIM_THRESHOLD_": str(memory.TRIM_THRESHOLD),
}
# PyTorch once more under glibc's default settings, as a user's process runs it: the number it gives
# out of the box (its LSTM LM step ran at 3,743 against 4,563 words/s so on this machine, measured: page faults).
TORCH_GLIBC = "torch-glibc"


def peak_rss_mb() -> float:
    """This process's peak resident set size in MB (Linux reports ru_maxrss in KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def time_steps(step: Callable[[int], float], warmup: int, steps: int) -> tuple[list[tuple[float, float]], float]:
    """Run ``step(i)`` for warmup + steps iterations; return the (wall, CPU) seconds of each timed one and the
    last step's return value (a loss). CPU seconds are the process's own: they do not count time the OS gave
    the core to another process, the fairer number on a shared machine."""
    for i in range(warmup):
        step(i)
    times, last = [], float("nan")
    for i in range(warmup, warmup + steps):
        t0, c0 = time.perf_counter(), time.process_time()
        last = step(i)
        times.append((time.perf_counter() - t0, time.process_time() - c0))
    return times, last


def spawn(script: str, argv: list[str], glibc_defaults: bool = False) -> dict | None:
    """Run ``python script *argv`` (under ``SAME_MALLOC``; with ``glibc_defaults``, under glibc's own malloc
    settings instead, minidl's tuning off) and parse the JSON object on its last stdout line (None if it failed)."""
    if glibc_defaults:
        env = {k: v for k, v in os.environ.items() if k not in SAME_MALLOC}
        env["MINIDL_MALLOC"] = "default"
    else:
        env = {**os.environ, **SAME_MALLOC}
    proc = subprocess.run([sys.executable, os.path.abspath(script), *argv], capture_output=True, text=True, env=env)
    if proc.stderr:
        sys.stderr.write(proc.stderr)
    if proc.returncode != 0:
        print(f"{os.path.basename(script)} {' '.join(argv)}: failed (exit {proc.returncode})", file=sys.stderr)
        return None
    return json.loads(proc.stdout.strip().splitlines()[-1])


def median_spread(values: list[float]) -> str:
    """'median (min-max)' of a list of numbers, for a benchmark's printed line."""
    v = sorted(values)
    med = v[len(v) // 2] if len(v) % 2 else 0.5 * (v[len(v) // 2 - 1] + v[len(v) // 2])
    return f"{med:,.1f} ({v[0]:,.1f}-{v[-1]:,.1f})"


def report(rounds: list[dict[str, dict | None]], impls: list[str], key: str, unit: str, target: float) -> None:
    """Print each implementation's median ``key`` over the rounds with its spread and peak RSS, then the
    minidl / torch ratio of the medians and the spread of the per-round ratios (rounds were interleaved)."""
    import statistics

    for name in impls:
        rs = [r[name] for r in rounds if r.get(name)]
        if rs:
            rss = max(r["peak_rss_mb"] for r in rs)
            print(
                f"{name:>11}: {median_spread([r[key] for r in rs])} {unit} over {len(rs)} rounds, "
                f"peak RSS {rss:,.0f} MB"
            )
    for other, what in (("torch", f"target >= {target}x"), (TORCH_GLIBC, "PyTorch under glibc's default malloc")):
        both = [(r["minidl"][key], r[other][key]) for r in rounds if r.get("minidl") and r.get(other)]
        if both:
            ratio = statistics.median(a for a, _ in both) / statistics.median(b for _, b in both)
            per_round = sorted(a / b for a, b in both)
            print(
                f"  ratio minidl / {other}: {ratio:.2f}x {unit} (per round {per_round[0]:.2f}-{per_round[-1]:.2f}x; "
                f"{what})"
            )
