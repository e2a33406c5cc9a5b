"""The virtual-time cluster against SimGrid: ring, recursive doubling and the binomial tree, p = 8..256.

For each case minidl traces the real algorithm (collectives.virtual_time.trace), times it with
``collectives.allreduce_time`` (the event or rounds engine) and with the closed form (engine
"formula"), and hands the same traces to SimGrid (benchmarks/simgrid_oracle.py, run by the system
Python that has SimGrid's bindings: ``apt-get install python3-simgrid``) on the same platform:
SimGrid's CM02 model with its factors 1, links of 1.25 GB/s (10 Gb/s) and ``--link-latency`` each,
no software alpha (SimGrid has none), gamma 0.1 ns/B; flows share a link in proportion to 1 / their
latency as CM02 shares them (minidl's ``sharing="rtt"``; its default, "maxmin", shares equally). Platforms:

    crossbar   host -> switch -> host: 2 links a message, none shared
    fattree    leaves of --leaf-size hosts, 2:1 oversubscribed trunks: 2 links within a leaf, 4 between
    torus2d    SimGrid's TORUS (balanced dims): a link a hop, dimension-order routing

Prints minidl / SimGrid per case and the largest error per topology and p; the target is 3%.

    python benchmarks/simgrid_validation.py                 # 81 cases; SimGrid's p = 256 rings take minutes
    python benchmarks/simgrid_validation.py --p 8,64 --json out.json
    python benchmarks/simgrid_validation.py --table out.json   # the table again, from saved rows
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

import collectives  # noqa: E402
from collectives.cost import CostParams  # noqa: E402
from collectives.virtual_time.topology import balanced_dims  # noqa: E402
from collectives.virtual_time.trace import trace_rows  # noqa: E402

ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simgrid_oracle.py")
SYSTEM_PYTHON = "/usr/bin/python3"
BANDWIDTH, GAMMA = 1.25e9, 1e-10
ALGORITHMS = ("ring", "recursive_doubling", "tree")
TOPOLOGIES = ("crossbar", "fattree", "torus2d")
SIZES = (1024, 1 << 20, 100_000_000)


def simgrid_available(python: str = SYSTEM_PYTHON) -> str | None:
    """None when ``python`` imports simgrid; otherwise why not (a one-line reason)."""
    if not os.path.exists(python):
        return f"{python} not found"
    found = subprocess.run([python, "-c", "import simgrid"], capture_output=True, text=True)
    return None if found.returncode == 0 else f"{python} cannot import simgrid (apt-get install python3-simgrid)"


def options(topology: str, leaf_size: int) -> dict:
    """minidl's network options for ``topology`` (the oracle gets the same numbers)."""
    if topology == "fattree":
        return {"topology": "fattree", "leaf_size": leaf_size, "oversubscription": 2.0}
    return {"topology": topology}


def simgrid_time(algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int) -> float:
    """SimGrid's virtual seconds for the traced call (one process per job: SimGrid's engine is a singleton)."""
    spec = {"bandwidth": BANDWIDTH, "latency": link_latency, **options(topology, leaf_size)}
    spec["dims"] = list(balanced_dims(p, 2))
    traces = [[list(row) for row in rows] for rows in trace_rows(algorithm, p, nbytes)]
    job = json.dumps({"platform": spec, "gamma": GAMMA, "traces": traces})
    out = subprocess.run([SYSTEM_PYTHON, ORACLE], input=job, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["time"])


def minidl_time(
    algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int, engine: str = "auto"
) -> float:
    params = CostParams(0.0, 1 / BANDWIDTH, GAMMA)
    opts = options(topology, leaf_size)
    return collectives.allreduce_time(
        algorithm, p, nbytes, "crossbar", params, link_latency=link_latency, engine=engine, sharing="rtt", **opts
    )


def run_case(algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int) -> dict:
    t0 = time.perf_counter()
    oracle = simgrid_time(algorithm, p, nbytes, topology, link_latency, leaf_size)
    t1 = time.perf_counter()
    ours = minidl_time(algorithm, p, nbytes, topology, link_latency, leaf_size)
    t2 = time.perf_counter()
    formula = minidl_time(algorithm, p, nbytes, topology, link_latency, leaf_size, engine="formula")
    return {
        "topology": topology, "algorithm": algorithm, "p": p, "nbytes": nbytes, "simgrid_s": oracle,
        "minidl_s": ours, "formula_s": formula, "simgrid_wall_s": t1 - t0, "minidl_wall_s": t2 - t1,
    }  # fmt: skip


def error(row: dict, key: str = "minidl_s") -> float:
    """Relative error of ``key`` against SimGrid."""
    return row[key] / row["simgrid_s"] - 1


def summary(rows: list[dict]) -> list[str]:
    """The validation table: the largest and mean |error| per p (all topologies), then per topology and p."""
    lines = [f"{'p':>5}{'topology':>10}{'cases':>7}{'max |err|':>11}{'mean |err|':>12}{'formula max':>13}"]
    groups = [(p, "all") for p in sorted({r["p"] for r in rows})]
    groups += [(p, t) for t in dict.fromkeys(r["topology"] for r in rows) for p in sorted({r["p"] for r in rows})]
    for p, topology in groups:
        mine = [r for r in rows if r["p"] == p and topology in ("all", r["topology"])]
        if not mine:
            continue
        sim = [abs(error(r)) for r in mine]
        formula = max(abs(error(r, "formula_s")) for r in mine)
        lines.append(
            f"{p:>5}{topology:>10}{len(mine):>7}{100 * max(sim):>10.2g}%{100 * np.mean(sim):>11.2g}%{100 * formula:>12.2g}%"
        )
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--p", default="8,32,64,256", help="rank counts (default 8,32,64,256)")
    ap.add_argument("--sizes", default=",".join(map(str, SIZES)), help="bytes per rank (default 1 KiB, 1 MiB, 100 MB)")
    ap.add_argument("--topologies", default=",".join(TOPOLOGIES))
    ap.add_argument("--algorithms", default=",".join(ALGORITHMS))
    ap.add_argument("--link-latency", type=float, default=1e-6, help="seconds per link (default 1 us)")
    ap.add_argument("--leaf-size", type=int, default=4, help="fat tree: hosts per leaf (default 4)")
    ap.add_argument("--json", metavar="FILE", help="write the rows as JSON")
    ap.add_argument("--table", metavar="FILE", help="print the validation table of rows saved with --json, and stop")
    args = ap.parse_args()
    if args.table:
        with open(args.table) as f:
            print("\n".join(summary(json.load(f))))
        return
    reason = simgrid_available()
    if reason:
        raise SystemExit(f"simgrid_validation: {reason}")
    print(f"links {BANDWIDTH / 1e9:g} GB/s, {args.link_latency * 1e6:g} us each; gamma {GAMMA * 1e9:g} ns/B; "
          f"no software alpha; fat tree leaves of {args.leaf_size}, 2:1; SimGrid 3.32 CM02, factors 1")  # fmt: skip
    head = f"{'topology':<10}{'algorithm':<20}{'p':>5}{'bytes':>11}{'SimGrid s':>13}{'minidl/SG':>11}{'formula/SG':>12}"
    print(head + f"{'wall SG':>9}{'minidl':>8}")
    rows = []
    for topology in args.topologies.split(","):
        for p in map(int, args.p.split(",")):
            for algorithm in args.algorithms.split(","):
                for nbytes in map(int, args.sizes.split(",")):
                    r = run_case(algorithm, p, nbytes, topology, args.link_latency, args.leaf_size)
                    rows.append(r)
                    print(f"{topology:<10}{algorithm:<20}{p:>5}{nbytes:>11}{r['simgrid_s']:>13.6g}"
                          f"{1 + error(r):>11.4f}{1 + error(r, 'formula_s'):>12.4f}"
                          f"{r['simgrid_wall_s']:>8.1f}s{r['minidl_wall_s']:>7.2f}s", flush=True)  # fmt: skip
    print("\n" + "\n".join(summary(rows)))
    worst = max(abs(error(r)) for r in rows)
    print(f"\n{len(rows)} cases; largest |minidl / SimGrid - 1| {100 * worst:.2f}% (target 3%)")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
