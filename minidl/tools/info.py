"""``python -m minidl.info``: what this machine runs NumPy's matrix products with, and how fast.

Every number minidl prints (words/s, images/s, a ratio to PyTorch) depends on the BLAS kernel under
NumPy, and that kernel is not always the best the CPU has. OpenBLAS picks one per CPU at start-up
(Haswell's for AVX2, SkylakeX's for AVX-512, ...), unless ``OPENBLAS_CORETYPE`` names another: some
machines set it for old OpenBLAS builds, and on an AVX-512 CPU ``OPENBLAS_CORETYPE=Haswell`` halves
the single-core sgemm rate (measured: 120-129 against 217-248 GFLOP/s on one AMD EPYC core). So this
module reports, and every benchmark prints as its header:

    NumPy and its BLAS library, with the kernel that library runs (threadpoolctl's ``architecture``)
    the CPU model, its vector ISA (AVX2, AVX-512, AMX, from /proc/cpuinfo), cores, BLAS threads
    the MPI library (mpi4py's ``MPI.Get_library_version``, without initialising MPI)
    a measured sgemm rate on one thread: C = A @ B, float32, n x n x n, 2 n^3 flops, best of 5

and, when a variable forces a kernel below what the CPU supports, a warning that names it and the
command prefix that runs without it (``env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE ...``).

    facts = machine_facts()                # a dict, JSON-ready (logs, benchmark results)
    print("\\n".join(header_lines(facts)))
    kernel_warnings(os.environ, cpu_flags(), facts["blas"])   # the pure check the warning comes from
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from typing import Any

import numpy as np

from minidl.tools.threads import RANK_VARIABLES

# The vector ISA a kernel needs, as a level: 0 SSE, 1 AVX, 2 AVX2 + FMA, 3 AVX-512 (F and BW).
LEVEL_NAMES = ("SSE", "AVX", "AVX2", "AVX-512")
OPENBLAS_KERNEL_LEVEL = {  # OpenBLAS core names (OPENBLAS_CORETYPE values, threadpoolctl's architecture)
    **dict.fromkeys(("skylakex", "cooperlake", "sapphirerapids"), 3),
    **dict.fromkeys(("haswell", "zen", "excavator"), 2),
    **dict.fromkeys(("sandybridge", "bulldozer", "piledriver", "steamroller"), 1),
    **dict.fromkeys(("nehalem", "core2", "penryn", "dunnington", "prescott", "atom", "barcelona", "opteron"), 0),
}
# Variables that choose a BLAS code path (first those that force a kernel, then OpenBLAS's cache-size override,
# which comes with OPENBLAS_CORETYPE on the machines that set it), and NumPy's own switch for its SIMD loops.
KERNEL_VARIABLES = ("OPENBLAS_CORETYPE", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "OPENBLAS_L2_SIZE")
THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
SGEMM_N, SGEMM_QUICK_N, SGEMM_REPEATS = 2000, 1000, 5


def cpu_fields(cpuinfo: str = "/proc/cpuinfo") -> dict[str, str]:
    """The first processor's fields of Linux's /proc/cpuinfo (``model name``, ``flags``, ``cpu family``, ...);
    empty elsewhere."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo) as f:
            for line in f:
                if not line.strip():
                    break  # the end of the first processor's block
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    return fields


def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> set[str]:
    """The CPU's feature flags (/proc/cpuinfo's ``flags``; empty where it is absent)."""
    return set(cpu_fields(cpuinfo).get("flags", "").split())


def cpu_model(cpuinfo: str = "/proc/cpuinfo") -> str:
    """The CPU's model name with its family and model numbers, which tell CPU generations apart where a virtual
    machine reports only "AMD EPYC" (``platform.processor()`` where /proc/cpuinfo is absent)."""
    fields = cpu_fields(cpuinfo)
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    numbers = f" (family {fields['cpu family']} model {fields['model']})" if "cpu family" in fields else ""
    return fields["model name"] + numbers


def isa_level(flags: set[str]) -> int | None:
    """The widest vector ISA of ``flags`` as a level (3 AVX-512, 2 AVX2 + FMA, 1 AVX, 0 SSE); None if unknown."""
    if not flags:
        return None
    if {"avx512f", "avx512bw"} <= flags:
        return 3
    if {"avx2", "fma"} <= flags:
        return 2
    return 1 if "avx" in flags else 0


def vector_isa(flags: set[str]) -> list[str]:
    """The vector extensions that matter to a GEMM kernel, by name: AVX, AVX2, FMA, AVX-512, its BF16 and VNNI, AMX."""
    names = {
        "avx": "AVX",
        "avx2": "AVX2",
        "fma": "FMA",
        "avx512f": "AVX-512",
        "avx512_bf16": "AVX-512 BF16",
        "avx512_vnni": "AVX-512 VNNI",
        "amx_tile": "AMX",
    }
    return [name for flag, name in names.items() if flag in flags]


def _mkl_level(value: str) -> int | None:
    """The ISA level an MKL_ENABLE_INSTRUCTIONS or MKL_CBWR value allows (None: no limit, or a value not known)."""
    v = value.upper().split(",")[0].strip()
    if v in ("", "AUTO"):
        return None
    if v == "COMPATIBLE" or v.startswith("SSE"):
        return 0
    if v.startswith(("AVX512", "AVX10")):
        return 3
    return 2 if v.startswith("AVX2") else (1 if v.startswith("AVX") else None)


def unset_prefix(environ: Mapping[str, str]) -> str:
    """``env -u VAR ...`` for the kernel variables set in ``environ`` (OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE always)."""
    names = [v for v in KERNEL_VARIABLES if v in environ]
    names += [v for v in ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE") if v not in names]
    return "env " + " ".join(f"-u {v}" for v in names)


def kernel_warnings(environ: Mapping[str, str], flags: set[str], blas: list[dict[str, Any]]) -> list[str]:
    """One line per variable (or build) that makes a BLAS run below the CPU's vector ISA.

    ``environ``: the process environment; ``flags``: the CPU's flags (``cpu_flags()``); ``blas``: the BLAS
    libraries loaded, as threadpoolctl describes them (``internal_api``, ``architecture``). A pure function.
    """
    cpu = isa_level(flags)
    if cpu is None:
        return []
    out, fix = [], f"run without it: {unset_prefix(environ)} python ..."
    forced = environ.get("OPENBLAS_CORETYPE")
    level = OPENBLAS_KERNEL_LEVEL.get((forced or "").lower())
    if forced and level is not None and level < cpu:
        out.append(
            f"OPENBLAS_CORETYPE={forced} forces OpenBLAS's {forced} kernel ({LEVEL_NAMES[level]}) on a CPU with "
            f"{LEVEL_NAMES[cpu]}: the products run below this CPU's rate; {fix}"
        )
    for lib in blas:
        arch = str(lib.get("architecture") or "")
        level = OPENBLAS_KERNEL_LEVEL.get(arch.lower())
        if lib.get("internal_api") == "openblas" and not forced and level is not None and level < cpu:
            out.append(
                f"OpenBLAS {lib.get('version')} runs its {arch} kernel ({LEVEL_NAMES[level]}) on a CPU with "
                f"{LEVEL_NAMES[cpu]}: this build does not know the CPU (a newer NumPy or OpenBLAS would)"
            )
    for name in ("MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR"):
        level = _mkl_level(environ.get(name, ""))
        if level is not None and level < cpu:
            out.append(
                f"{name}={environ[name]} limits MKL (PyTorch's BLAS on x86) to {LEVEL_NAMES[level]} on a CPU "
                f"with {LEVEL_NAMES[cpu]}; {fix}"
            )
    return out


def sgemm_gflops(n: int = SGEMM_N, repeats: int = SGEMM_REPEATS, threads: int = 1) -> float:
    """The best rate of ``repeats`` float32 products [n, n] @ [n, n] (2 n^3 flops each) on ``threads`` BLAS
    threads, in GFLOP/s, after one untimed product (the library's start-up and the pages of C). Timed in this
    process's CPU seconds, as the benchmarks time their steps: time the OS gave the core to another process on a
    shared machine is not counted (with several threads, the rate per CPU-second of all of them)."""
    from threadpoolctl import threadpool_limits

    rng = np.random.default_rng(0)
    a, b = (rng.standard_normal((n, n), dtype=np.float32) for _ in range(2))
    c = np.empty((n, n), dtype=np.float32)
    best = float("inf")
    with threadpool_limits(limits=threads, user_api="blas"):
        np.matmul(a, b, out=c)
        for _ in range(repeats):
            t0 = time.process_time()
            np.matmul(a, b, out=c)
            best = min(best, time.process_time() - t0)
    return 2 * n**3 / best / 1e9


def blas_libraries() -> list[dict[str, Any]]:
    """The BLAS and OpenMP libraries this process has loaded (threadpoolctl), file names without their folders."""
    from threadpoolctl import threadpool_info

    keys = ("user_api", "internal_api", "prefix", "version", "architecture", "num_threads", "threading_layer")
    libs = []
    for lib in threadpool_info():
        entry = {k: lib.get(k) for k in keys}
        entry["file"] = os.path.basename(lib.get("filepath") or "")
        libs.append(entry)
    return libs


def machine_facts(sgemm_n: int | None = SGEMM_N, environ: Mapping[str, str] | None = None) -> dict[str, Any]:
    """The facts as a JSON-ready dict: numpy, blas (loaded BLAS libraries), openmp, cpu (model, isa, flags level,
    cores), threads (the thread variables set), kernel_env (kernel variables set), warnings, unset_prefix, mpi,
    sgemm (n, threads, gflops; None when ``sgemm_n`` is None)."""
    env = os.environ if environ is None else environ
    flags = cpu_flags()
    libs = blas_libraries()
    blas = [lib for lib in libs if lib["user_api"] == "blas"]
    level = isa_level(flags)
    facts: dict[str, Any] = {
        "numpy": np.__version__,
        "blas": blas,
        "openmp": [lib for lib in libs if lib["user_api"] == "openmp"],
        "cpu": {
            "model": cpu_model(),
            "isa": vector_isa(flags),
            "level": None if level is None else LEVEL_NAMES[level],
            "cores": os.cpu_count(),
            "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count(),
        },
        "threads": {v: env[v] for v in THREAD_VARIABLES if v in env},
        "kernel_env": {v: env[v] for v in KERNEL_VARIABLES if v in env},
        "warnings": kernel_warnings(env, flags, blas),
        "unset_prefix": unset_prefix(env),
        "mpi": mpi_library(),
        "sgemm": None,
    }
    if sgemm_n:
        facts["sgemm"] = {"n": sgemm_n, "threads": 1, "gflops": round(sgemm_gflops(sgemm_n), 1)}
    return facts


def mpi_library() -> str | None:
    """The first line of ``MPI_Get_library_version`` ("MPICH Version: 5.0.2", "Open MPI v5.0.3, ..."), or None
    without mpi4py or an MPI library.

    MPI is not initialised for it (the call is allowed before ``MPI_Init``): where mpi4py.MPI is loaded already it
    is asked here; otherwise a child Python asks with ``mpi4py.rc.initialize = False``, so that this process's MPI
    state stays as it was (a later ``dist.init()`` starts MPI as usual) and minidl.distributed stays unloaded.
    """
    mpi = sys.modules.get("mpi4py.MPI")
    if mpi is not None:
        text = mpi.Get_library_version()
    else:
        code = "import mpi4py; mpi4py.rc.initialize = False; from mpi4py import MPI; print(MPI.Get_library_version())"
        try:
            proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        except (OSError, subprocess.TimeoutExpired):
            return None
        text = proc.stdout if proc.returncode == 0 else ""
    lines = text.strip().splitlines()
    return " ".join(lines[0].split()) if lines else None


def header_lines(facts: dict[str, Any]) -> list[str]:
    """The facts as the lines a benchmark prints first."""
    cpu = facts["cpu"]
    isa = ", ".join(cpu["isa"]) or "ISA unknown"
    lines = [f"machine: {cpu['model']}: {isa}; {cpu['usable_cores']} of {cpu['cores']} cores usable"]
    for lib in facts["blas"]:
        lines.append(
            f"numpy {facts['numpy']}, BLAS {lib['internal_api']} {lib['version']} ({lib['file']}), "
            f"kernel {lib['architecture']}, BLAS threads {lib['num_threads']} ({lib['threading_layer']})"
        )
    if not facts["blas"]:
        lines.append(f"numpy {facts['numpy']}, no BLAS library found by threadpoolctl")
    threads = ", ".join(f"{k}={v}" for k, v in facts["threads"].items()) or "no thread variable set"
    kernel = ", ".join(f"{k}={v}" for k, v in facts["kernel_env"].items()) or "no kernel variable set"
    lines.append(f"threads: {threads}; {kernel}; MPI: {facts['mpi'] or 'mpi4py not installed'}")
    if facts["sgemm"]:
        s = facts["sgemm"]
        lines.append(
            f"sgemm {s['n']}^3 float32, {s['threads']} thread: {s['gflops']:.1f} GFLOP/s (best of {SGEMM_REPEATS})"
        )
    lines += [f"warning: {w}" for w in facts["warnings"]]
    return lines


def print_header(quick: bool = False) -> dict[str, Any] | None:
    """Print the header lines and return the facts; under mpiexec only the first rank measures and prints (None
    elsewhere). ``quick``: the sgemm at 1000^3."""
    if any(os.environ.get(v, "0") != "0" for v in RANK_VARIABLES):
        return None
    facts = machine_facts(SGEMM_QUICK_N if quick else SGEMM_N)
    print("\n".join(header_lines(facts)), flush=True)
    return facts


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m minidl.info", description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help=f"sgemm at {SGEMM_QUICK_N}^3 instead of {SGEMM_N}^3")
    parser.add_argument("--json", action="store_true", help="print the facts as one JSON object")
    args = parser.parse_args(argv)
    facts = machine_facts(SGEMM_QUICK_N if args.quick else SGEMM_N)
    print(json.dumps(facts) if args.json else "\n".join(header_lines(facts)))


if __name__ == "__main__":
    main()
