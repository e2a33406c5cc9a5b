"""What the communication timeout costs: allreduce through a TimeoutComm against the bare communicator.

``TimeoutComm`` turns every blocking call into non-blocking requests polled against a deadline
(minidl/distributed/timeout.py). This measures the price, interleaved, under mpiexec:

    mpiexec -n 4 python benchmarks/comm_timeout.py [--repeats 7] [--calls 50]

For each message size and algorithm: the median time of one allreduce (over ``--calls`` calls, each
repeat a fresh median) bare and wrapped, their ratio, the min-max spread, and peak memory.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import collectives
import minidl.distributed as dist
from minidl.distributed.timeout import TimeoutComm
from minidl.tools.info import print_header
from minidl.tools.measure import busy_note, interleaved, peak_rss_mb, spread


def per_call(comm, x: np.ndarray, algorithm: str, calls: int) -> float:
    comm.Barrier()
    t0 = time.perf_counter()
    for _ in range(calls):
        collectives.allreduce(comm, x, algorithm=algorithm)
    return (time.perf_counter() - t0) / calls


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--calls", type=int, default=50)
    args = parser.parse_args()
    print_header(quick=True)  # rank 0: the BLAS kernel, CPU, MPI library
    bare = dist.init(timeout=0)
    wrapped = TimeoutComm(bare, 300.0)
    rank, p = bare.Get_rank(), bare.Get_size()
    if rank == 0:
        print(f"allreduce on {p} ranks, {args.repeats} interleaved repeats of {args.calls} calls: median (min-max)")
        print(f"{'bytes':>10s} {'algorithm':>19s} {'bare us':>20s} {'timeout us':>20s} {'ratio':>6s}")
    for nbytes in (1 << 10, 1 << 16, 1 << 22):
        x = np.ones(nbytes // 8)
        for algorithm in ("recursive_doubling", "ring"):
            calls = max(3, args.calls if nbytes < 1 << 20 else args.calls // 10)
            samples = interleaved(
                {
                    "bare": lambda x=x, a=algorithm, n=calls: per_call(bare, x, a, n),
                    "timeout": lambda x=x, a=algorithm, n=calls: per_call(wrapped, x, a, n),
                },
                args.repeats,
            )
            if rank == 0:
                (mb, lb, hb), (mt, lt, ht) = spread(samples["bare"]), spread(samples["timeout"])
                cell = lambda m, lo, hi: f"{1e6 * m:7.1f} ({1e6 * lo:.0f}-{1e6 * hi:.0f})"  # noqa: E731
                print(f"{nbytes:10d} {algorithm:>19s} {cell(mb, lb, hb):>20s} {cell(mt, lt, ht):>20s} {mt / mb:6.2f}")
                print(f"{'':10s} {busy_note(samples)}")
    if rank == 0:
        print(f"peak memory of rank 0: {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
