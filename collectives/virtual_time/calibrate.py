"""Measure this machine's alpha, beta and gamma and save them for the simulator.

    mpiexec -n 2 python -m collectives.virtual_time.calibrate --out calibration.json
    python -c "import collectives; from collectives import cost; \\
        print(collectives.allreduce_time('ring', 64, 1 << 20, params=cost.load_params('calibration.json')))"

cost.calibrate does the measuring (an exchange of short and of long messages among all ranks, a
ping-pong both ways at p = 2, and np.add for gamma; every rank takes the slowest rank's numbers;
``--cold``: each exchange after a pass over 64 MiB and a barrier, as a training step's comes after its compute);
rank 0 writes the JSON (cost.save_params: alpha, beta, gamma, and what they were measured on).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from typing import Any

from collectives import cost
from collectives.bench import parse_size


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m collectives.virtual_time.calibrate", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--out", default=None, help="JSON file to write (default: print only)")
    parser.add_argument("--large", default="16M", help="long message size for beta and gamma (default 16M)")
    parser.add_argument("--repeats", type=int, default=10, help="batches per measurement (median; default 10)")
    parser.add_argument(
        "--cold",
        action="store_true",
        help="measure each exchange after a pass over 64 MiB and a barrier, as a training step's comes after its "
        "compute (default: back to back)",
    )
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error(f"--repeats must be a positive integer, got {args.repeats}")
    try:
        args.large = parse_size(args.large)
    except ValueError:
        parser.error(f"--large: not a size: {args.large!r}")
    if args.large < 64:
        parser.error(f"--large must be at least 64 bytes, got {args.large}")
    return args


def main(argv: list[str] | None = None, comm: Any = None) -> cost.CostParams:
    """Calibrate on ``comm`` (default MPI.COMM_WORLD); rank 0 prints and writes --out. Returns the parameters."""
    args = parse_args(argv)
    if comm is None:
        from mpi4py import MPI

        comm = MPI.COMM_WORLD
    params = cost.calibrate(comm, large=args.large, repeats=args.repeats, apply=False, cold=args.cold)
    if comm.Get_rank() == 0:
        about = {"p": comm.Get_size(), "host": platform.node(), "large": args.large, "date": time.strftime("%Y-%m-%d")}
        about["cold"] = args.cold
        print(
            f"p={comm.Get_size()}: alpha {params.alpha * 1e6:.3g} us, beta {params.beta * 1e9:.3g} ns/B "
            f"({1e-9 / params.beta if params.beta else float('inf'):.3g} GB/s), gamma {params.gamma * 1e9:.3g} ns/B"
        )
        if args.out:
            cost.save_params(params, args.out, **about)
            print(f"saved to {args.out} (load it with collectives.cost.load_params)")
        sys.stdout.flush()
    return params


if __name__ == "__main__":
    main()
