"""Allreduce gradient averaging vs synchronous / asynchronous parameter server vs local SGD, on one task.

    mpiexec -n 3 python benchmarks/parallel_schemes.py [--steps 300] [--plot schemes.png] [--json out.json]

Every scheme trains the same MLP on the same generated images from the same initial weights, for the
same number of steps per worker with the same per-worker batch (weak scaling). The PS schemes give
S ranks to the servers, so they have P - S workers where allreduce and local SGD have P. Printed
(rank 0): throughput (samples/s over all workers), communication per step counted on the wire
(bytes sent + received: the busiest rank, and a worker), the training loss over the last 10 steps,
the held-out loss of the final model, the PS staleness (of the run with the median throughput; throughput as
the median and min-max of ``--repeats`` interleaved runs); the bytes per step predicted by the
protocols beside them; and a plot of loss against steps and against wall time.

Throughput on a laptop is a small-scale indication only: ranks share cores and memory bandwidth,
and messages go through shared memory, not a network, so communication is cheap here compared
with a cluster; the bytes per step are exact and scale-free.
"""

from __future__ import annotations

import argparse
import json
import os

import compare as C  # benchmarks/compare.py, beside this file
import numpy as np

from collectives.paths import check_output
from minidl.distributed.parameter_server.protocol import HEADER_BYTES
from minidl.tools.info import print_header
from minidl.tools.measure import busy_note, peak_rss_mb, spread


def main(argv: list[str] | None = None) -> list[C.SchemeResult] | None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300, help="steps per worker per scheme")
    parser.add_argument("--batch-size", type=int, default=32, help="samples per worker per step")
    parser.add_argument("--hidden", type=int, default=256, help="hidden units of the MLP")
    parser.add_argument("--size", type=int, default=16, help="image side (input = size * size)")
    parser.add_argument("--average-every", type=int, default=4, help="local SGD: k")
    parser.add_argument("--fetch-every", type=int, default=1, help="async PS: pull every n steps")
    parser.add_argument("--servers", type=int, default=1, help="parameter server ranks")
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--plot", metavar="PATH", help="write the loss curves (PNG)")
    parser.add_argument("--json", metavar="PATH", help="write the table's numbers")
    parser.add_argument("--quick", action="store_true", help="a few steps (CI)")
    parser.add_argument("--repeats", type=int, default=5, help="runs of every scheme, interleaved (median shown)")
    args = parser.parse_args(argv)
    check_output("--json", args.json, parser.prog)  # its folder made, before the runs
    print_header(quick=True)  # rank 0
    if args.quick or os.environ.get("MINIDL_QUICK") == "1":
        args.steps, args.hidden = min(args.steps, 20), min(args.hidden, 32)

    from mpi4py import MPI

    import minidl.distributed as dist

    comm = dist.init(MPI.COMM_WORLD)
    task = C.image_task(size=args.size, hidden=args.hidden, batch_size=args.batch_size, lr=args.lr)
    runs = (
        ("allreduce", "allreduce (grad avg)", {}),
        ("ps-sync", "PS sync", {"num_servers": args.servers}),
        ("ps-async", "PS async", {"num_servers": args.servers, "fetch_every": args.fetch_every}),
        ("local-sgd", f"local SGD k={args.average_every}", {"average_every": args.average_every}),
    )
    # every repeat runs each scheme once, in turn: a change of load falls on all of them alike
    rounds = [dist.run(C.compare, comm, task, args.steps, runs) for _ in range(max(args.repeats, 1))]
    if comm.Get_rank() != 0:
        return None
    samples = {r.label: [rnd[i].samples_per_second for rnd in rounds] for i, r in enumerate(rounds[0])}
    results = [
        min(col, key=lambda r: abs(r.samples_per_second - spread([x.samples_per_second for x in col])[0]))
        for col in zip(*rounds)
    ]  # each scheme's run with the median throughput
    P = comm.Get_size()
    nbytes = sum(p.data.nbytes for p in task.make_model().parameters())
    print(
        f"{task.name}: {nbytes / 1024:.1f} KiB of parameters; {P} ranks, {args.steps} steps per worker, "
        f"batch {args.batch_size} per worker"
    )
    print(C.format_table(results))
    print(
        f"\nthroughput, median (min-max) of {len(rounds)} interleaved runs; peak memory {peak_rss_mb():.0f} MB (rank 0)"
    )
    for label, values in samples.items():
        med, lo, hi = spread(values)
        print(f"  {label:<26} {med:10,.0f} samples/s ({lo:,.0f}-{hi:,.0f})")
    print(busy_note(samples))
    print("\npredicted KiB per step (sent + received, headers aside):")
    print(f"  allreduce (ring), every rank: 4 (P-1)/P x model = {C.allreduce_bytes_per_rank(nbytes, P) / 1024:.1f}")
    W = P - args.servers
    print(
        f"  parameter server, a server: 2 W/S x model = {C.server_bytes_per_step(nbytes, W, args.servers) / 1024:.1f}"
        f"; a worker: 2 x model = {2 * (nbytes + HEADER_BYTES) / 1024:.1f}"
    )
    print(f"  local SGD: allreduce / k = {C.allreduce_bytes_per_rank(nbytes, P) / args.average_every / 1024:.1f}")
    for r in results:
        if r.staleness.size:
            hist = np.bincount(r.staleness)
            print(f"{r.label} staleness histogram: " + " ".join(f"{s}:{n}" for s, n in enumerate(hist) if n))
    if args.plot:
        C.plot(results, args.plot, title=f"{task.name}, {P} ranks")
        print(f"plot: {args.plot}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                [
                    {
                        "scheme": r.label,
                        "ranks": r.ranks,
                        "servers": r.servers,
                        "workers": r.workers,
                        "samples_per_second": r.samples_per_second,
                        "bytes_per_step_max": r.bytes_per_step_max,
                        "bytes_per_step_worker": r.bytes_per_step_worker,
                        "final_loss": r.final_loss,
                        "train_loss_last10": float(np.mean(r.loss_curve[-10:])),
                        "staleness_mean": float(r.staleness.mean()) if r.staleness.size else None,
                        "staleness_max": int(r.staleness.max()) if r.staleness.size else None,
                    }
                    for r in results
                ],
                f,
                indent=1,
            )
    return results


if __name__ == "__main__":
    main()
