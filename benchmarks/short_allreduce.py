"""The short checked allreduce's own Python work per call: the general path against fastpath.py's plan.

Under mpiexec the time of a 1 KiB allreduce is one message plus the Python around it, and on a
shared machine the message's share is mostly the scheduler's. So this measures the Python alone,
in one process: a communicator whose partner "answers" at once with a copy of what was sent (as a
rank that agrees and brings the same data would), timing per call

    echo         the Sendrecv of the message alone (the floor: what any implementation pays here)
    general      the handshake path of agreement.py (checked_reduction with carries_short)
    fast         collectives.allreduce, which takes fastpath.py's plan

at 1, 4 and 16 KiB of float32, p = 2, medians of interleaved repeats with their min-max spread.
The Python work of a path is its time minus echo's. For the time against MPICH's Allreduce, run
``mpiexec -n 2 python -m collectives.bench --sizes 1K,4K,16K --algorithms auto``.

    python benchmarks/short_allreduce.py [--repeats 9]
"""

from __future__ import annotations

import argparse
import timeit

import numpy as np

import collectives
from collectives.dispatch import ALLREDUCE
from minidl.tools.info import print_header
from minidl.tools.measure import busy_note, interleaved, peak_rss_mb, spread


class EchoComm:
    """Rank 0 of 2 whose partner sends back exactly what it receives (it agrees and holds the same data)."""

    def Get_rank(self) -> int:
        return 0

    def Get_size(self) -> int:
        return 2

    def Sendrecv(self, sendbuf, dest, sendtag, recvbuf, source, recvtag) -> None:
        sent = memoryview(sendbuf).cast("B")
        memoryview(recvbuf).cast("B")[: len(sent)] = sent


def per_call(fn, number: int):
    """A measure function: microseconds per call of fn, averaged over ``number`` calls."""
    return lambda: timeit.timeit(fn, number=number) / number * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=9)
    parser.add_argument("--number", type=int, default=3000, help="calls per measurement")
    args = parser.parse_args()
    print_header()
    comm, general = EchoComm(), ALLREDUCE["recursive_doubling"]
    print(f"{'size':>6} {'path':>8} {'us/call':>9} {'min-max':>15} {'Python us':>10}")
    for nbytes in (1 << 10, 4 << 10, 16 << 10):
        x = np.ones(nbytes // 4, np.float32)
        room = np.empty(nbytes + 256, np.uint8)
        configs = {
            "echo": per_call(lambda x=x, room=room: comm.Sendrecv(x, 1, 1, room, 1, 1), args.number),
            "general": per_call(lambda x=x: general(comm, x, "sum", True), args.number),
            "fast": per_call(lambda x=x: collectives.allreduce(comm, x), args.number),
        }
        samples = interleaved(configs, repeats=args.repeats)
        floor = spread(samples["echo"])[0]
        for name, values in samples.items():
            median, lo, hi = spread(values)
            extra = f"{median - floor:10.2f}" if name != "echo" else f"{'-':>10}"
            print(f"{nbytes >> 10:>5}K {name:>8} {median:9.2f} {f'{lo:.2f}-{hi:.2f}':>15} {extra}")
        general_work, fast_work = (spread(samples[k])[0] - floor for k in ("general", "fast"))
        print(f"       Python work per call: fast / general = {fast_work / general_work:.2f}; {busy_note(samples)}")
    print(f"peak memory {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
