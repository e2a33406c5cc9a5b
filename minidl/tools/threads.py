"""One BLAS thread per rank when MPI ranks share a node, unless the user chose otherwise.

NumPy's BLAS (OpenBLAS, MKL) starts one thread per core in every process. Four ranks on a 4-core node
then run 16 threads on 4 cores, which fight for the cores and the caches: a data-parallel LSTM run was
17x slower that way than with one thread per rank. The Makefile sets ``OMP_NUM_THREADS=1``; a command
typed by hand does not, so the entry points (``python -m minidl.train``, ``python -m collectives.bench``)
call ``limit_blas_threads()`` first. It changes nothing when the user set any of the thread variables,
and it warns when ranks x threads exceed the node's cores (with one thread per rank: when ranks exceed cores).
"""

from __future__ import annotations

import os
import sys

THREAD_VARIABLES = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "VECLIB_MAXIMUM_THREADS")
# How many ranks this launcher put on this node: MPICH/Hydra, Open MPI, Slurm (srun), Intel MPI.
LOCAL_SIZE_VARIABLES = ("MPI_LOCALNRANKS", "OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCAL_NRANKS")
RANK_VARIABLES = ("PMI_RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID")


def ranks_on_this_node(environ: dict[str, str] | None = None) -> int:
    """The number of ranks the MPI launcher started on this node (1 when not launched by one)."""
    env = os.environ if environ is None else environ
    for name in LOCAL_SIZE_VARIABLES:
        value = env.get(name, "").split("(")[0]  # Slurm may say "4(x2)"
        if value.isdigit() and int(value) > 0:
            return int(value)
    return 1


def _rank(env: dict[str, str] | os._Environ[str]) -> int:
    for name in RANK_VARIABLES:
        if env.get(name, "").isdigit():
            return int(env[name])
    return 0


def limit_blas_threads(environ: dict[str, str] | None = None, quiet: bool = False) -> int | None:
    """Keep one BLAS thread per rank when ranks share a node; returns the limit set, or None.

    Nothing is changed when a thread variable is set (the user chose) or when one rank runs on the node.
    Rank 0 prints one line saying what was done, and a warning when ranks x threads exceed the cores.
    """
    env = os.environ if environ is None else environ
    local, cores = ranks_on_this_node(env), os.cpu_count() or 1
    chosen = [name for name in THREAD_VARIABLES if env.get(name)]
    threads = env[chosen[0]] if chosen else "1"
    if threads.isdigit() and local * int(threads) > cores and not quiet and _rank(env) == 0:
        why = f" ({chosen[0]})" if chosen else ""
        print(
            f"warning: {local} ranks x {threads} thread{'s' * (threads != '1')}{why} on {cores} cores: the ranks will "
            "fight for the cores (each step waits for the slowest); use at most one rank per core"
            + ("; set OMP_NUM_THREADS so that ranks x threads <= cores" if chosen else ""),
            file=sys.stderr,
        )
    if chosen or local <= 1:
        return None
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=1, user_api="blas")
    threadpool_limits(limits=1, user_api="openmp")
    if not quiet and _rank(env) == 0:
        print(
            f"{local} ranks share this node: one BLAS thread per rank (set OMP_NUM_THREADS to choose otherwise)",
            flush=True,
        )
    return 1
