"""The virtual-time cluster against SimGrid: allreduce algorithms, gather and scatter, p = 8..256.

For each case minidl traces the real algorithm (collectives.virtual_time.trace), times it with
``collectives.allreduce_time`` (the event or rounds engine) and with the closed form (engine
"formula"), and hands the same traces to SimGrid (benchmarks/simgrid_oracle.py, run by the system
Python that has SimGrid's bindings: ``apt-get install python3-simgrid``) on the same platform:
SimGrid's CM02 model with its factors 1, links of 1.25 GB/s (10 Gb/s) and ``--link-latency`` each,
no software alpha (SimGrid has none), gamma 0.1 ns/B; flows share a link in proportion to 1 / their
latency as CM02 shares them (minidl's ``sharing="rtt"``; its default, "maxmin", shares equally). Platforms:

    crossbar          host -> switch -> host: 2 links a message, none shared (for allreduce algorithms only:
                      no rank of theirs sends two messages at once, so the oracle's switch is a crossbar)
    switch            the same, the NICs shared (gather's root receives every message through its downlink)
    fattree           leaves of --leaf-size hosts, 2:1 oversubscribed aggregated trunks (routing "trunk"):
                      2 links within a leaf, 4 between leaves
    ftree2            SimGrid's FAT_TREE cluster, leaves of --leaf-size hosts with leaf_size / 2 uplinks of
                      their own, routed destination-mod-k (minidl's routing="static"; InfiniBand's subnet
                      manager calls its fat-tree routing engine "ftree")
    ftree3            the same with three levels: pods of 4 leaves, each spine 2:1 (pod_size=4,
                      spine_oversubscription=2); 6 links between pods
    torus2d           SimGrid's TORUS (balanced dims): a link a hop, dimension-order routing; for gather and
                      scatter with its limiter_link as the NIC (see simgrid_oracle.py)
    dragonfly         SimGrid's DRAGONFLY with one chassis a group: routers of 2 hosts, groups of 4 routers
                      all-to-all, a global link between every two groups (p <= 32), minimal routing

On the routed fat trees each row also holds ``trunk_s``: minidl's default aggregated trunk on that platform.
Prints minidl / SimGrid per case and the largest error per topology and p; the target is 3%.

    python benchmarks/simgrid_validation.py                 # 81 cases; SimGrid's p = 256 rings take minutes
    python benchmarks/simgrid_validation.py --p 8,64 --json out.json
    python benchmarks/simgrid_validation.py --p 12,16,24,96 --topologies ftree2,ftree3,switch \
        --algorithms ring,recursive_doubling,rabenseifner,tree,gather,scatter --sizes 1024,1048576
    python benchmarks/simgrid_validation.py --table out.json   # the table again, from saved rows
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import collectives  # noqa: E402
from benchmarks.validation_tables import error, saved_simgrid, simgrid_table, simgrid_verdict  # noqa: E402
from collectives.cost import ALGORITHMS as ALLREDUCE  # noqa: E402
from collectives.cost import CostParams  # noqa: E402
from collectives.virtual_time.network import get_network  # noqa: E402
from collectives.virtual_time.topology import balanced_dims  # noqa: E402
from collectives.virtual_time.trace import trace_rows  # noqa: E402
from minidl.tools.info import cpu_model  # noqa: E402

ORACLE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "simgrid_oracle.py")
SYSTEM_PYTHON = "/usr/bin/python3"
BANDWIDTH, GAMMA = 1.25e9, 1e-10
ALGORITHMS = ("ring", "recursive_doubling", "tree")
TOPOLOGIES = ("crossbar", "fattree", "torus2d")  # the default sweep
ROOTED = ("gather", "scatter")  # the root's NIC carries every block: not on "crossbar", which has no NICs
PLATFORMS = ("crossbar", "switch", "fattree", "ftree2", "ftree3", "torus2d", "dragonfly")
SIZES = (1024, 1 << 20, 100_000_000)


def machine() -> str:
    """What the saved rows ran on: the CPU, its cores, SimGrid's version."""
    found = subprocess.run([SYSTEM_PYTHON, "-c", "import simgrid; print(simgrid.simgrid_version)"],
                           capture_output=True, text=True)  # fmt: skip
    version = found.stdout.strip().splitlines()[-1] if found.returncode == 0 and found.stdout.strip() else "?"
    return f"{cpu_model()}, {os.cpu_count()} cores; SimGrid {version}"


def simgrid_available(python: str = SYSTEM_PYTHON) -> str | None:
    """None when ``python`` imports simgrid; otherwise why not (a one-line reason)."""
    if not os.path.exists(python):
        return f"{python} not found"
    found = subprocess.run([python, "-c", "import simgrid"], capture_output=True, text=True)
    return None if found.returncode == 0 else f"{python} cannot import simgrid (apt-get install python3-simgrid)"


def options(topology: str, leaf_size: int, routing: str | None = None) -> dict:
    """minidl's network options for ``topology`` (PLATFORMS; the oracle gets the same numbers); ``routing``
    overrides a fat tree's (the routed platforms' trunk column)."""
    if topology not in PLATFORMS:
        raise ValueError(f"unknown platform {topology!r}: expected one of {', '.join(PLATFORMS)}")
    if "tree" in topology:
        tree = {"topology": "fattree", "leaf_size": leaf_size, "oversubscription": 2.0, "routing": "trunk"}
        if topology != "fattree":
            tree["routing"] = "static"
        if topology == "ftree3":
            tree.update(pod_size=4, spine_oversubscription=2.0)
        return {**tree, "routing": routing or tree["routing"]}
    if topology == "dragonfly":  # routers of 2 hosts in groups of 4 (so at most 32 hosts)
        return {"topology": "dragonfly", "router_size": 2, "group_size": 4}
    return {"topology": topology}


def simgrid_time(algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int) -> float:
    """SimGrid's virtual seconds for the traced call (one process per job: SimGrid's engine is a singleton)."""
    spec = {"bandwidth": BANDWIDTH, "latency": link_latency, **options(topology, leaf_size)}
    spec["dims"] = list(balanced_dims(p, 2))
    spec["limiter"] = algorithm in ROOTED  # SimGrid's one-link-both-ways NIC on the torus (simgrid_oracle.py)
    traces = [[list(row) for row in rows] for rows in trace_rows(algorithm, p, nbytes)]
    job = json.dumps({"platform": spec, "gamma": GAMMA, "traces": traces})
    out = subprocess.run([SYSTEM_PYTHON, ORACLE], input=job, capture_output=True, text=True, check=True)
    return float(json.loads(out.stdout.strip().splitlines()[-1])["time"])


def minidl_time(
    algorithm: str,
    p: int,
    nbytes: int,
    topology: str,
    link_latency: float,
    leaf_size: int,
    engine: str = "auto",
    routing: str | None = None,
) -> float:
    params = CostParams(0.0, 1 / BANDWIDTH, GAMMA)
    opts = options(topology, leaf_size, routing)
    return collectives.allreduce_time(
        algorithm, p, nbytes, "crossbar", params, link_latency=link_latency, engine=engine, sharing="rtt", **opts
    )


def formula_time(algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int) -> float:
    """The closed form: engine "formula" for an allreduce; for gather and scatter the root's NIC, which carries
    every other rank's block (nbytes each) at the link's bandwidth, after the longest route's latency."""
    if algorithm in ALLREDUCE:
        return minidl_time(algorithm, p, nbytes, topology, link_latency, leaf_size, engine="formula")
    params = CostParams(0.0, 1 / BANDWIDTH, GAMMA)
    fabric = get_network("crossbar", params, link_latency=link_latency, **options(topology, leaf_size)).fabric(p)
    return max(fabric.hops(0, r) for r in range(1, p)) * link_latency + (p - 1) * nbytes / BANDWIDTH


def run_case(algorithm: str, p: int, nbytes: int, topology: str, link_latency: float, leaf_size: int) -> dict:
    t0 = time.perf_counter()
    oracle = simgrid_time(algorithm, p, nbytes, topology, link_latency, leaf_size)
    t1 = time.perf_counter()
    ours = minidl_time(algorithm, p, nbytes, topology, link_latency, leaf_size)
    t2 = time.perf_counter()
    formula = formula_time(algorithm, p, nbytes, topology, link_latency, leaf_size)
    row = {
        "topology": topology, "algorithm": algorithm, "p": p, "nbytes": nbytes, "simgrid_s": oracle,
        "minidl_s": ours, "formula_s": formula, "simgrid_wall_s": t1 - t0, "minidl_wall_s": t2 - t1,
    }  # fmt: skip
    if topology.startswith("ftree"):  # what the aggregated trunk (minidl's default) says of the routed platform
        row["trunk_s"] = minidl_time(algorithm, p, nbytes, topology, link_latency, leaf_size, routing="trunk")
    return row


def run_cases(
    ps: list[int],
    topologies: tuple[str, ...] | list[str] = TOPOLOGIES,
    algorithms: tuple[str, ...] | list[str] = ALGORITHMS,
    sizes: tuple[int, ...] | list[int] = SIZES,
    link_latency: float = 1e-6,
    leaf_size: int = 4,
    workers: int = 1,
    progress: Callable[[dict], None] | None = None,
) -> list[dict]:
    """Every case (topology x p x algorithm x size), in that order: the rows of ``--json``. ``workers`` > 1 runs
    that many SimGrid processes at once (their wall times then overlap); ``progress`` is called with each row."""
    cases = [(a, p, n, t) for t in topologies for p in ps for a in algorithms for n in sizes]
    with ThreadPoolExecutor(max(1, workers)) as pool:
        futures = [pool.submit(run_case, a, p, n, t, link_latency, leaf_size) for a, p, n, t in cases]
        rows = []
        for future in futures:
            rows.append(future.result())
            if progress:
                progress(rows[-1])
    return rows


def print_row(r: dict) -> None:
    print(f"{r['topology']:<10}{r['algorithm']:<20}{r['p']:>5}{r['nbytes']:>11}{r['simgrid_s']:>13.6g}"
          f"{1 + error(r):>11.4f}{1 + error(r, 'formula_s'):>12.4f}"
          f"{r['simgrid_wall_s']:>8.1f}s{r['minidl_wall_s']:>7.2f}s"
          + (f"   trunk/SG {1 + error(r, 'trunk_s'):.4f}" if "trunk_s" in r else ""), flush=True)  # fmt: skip


def trunk_note(rows: list[dict]) -> str | None:
    """On the routed platforms, how far the aggregated trunk (minidl's default routing) is from SimGrid's FAT_TREE."""
    routed = [r for r in rows if "trunk_s" in r]
    if not routed:
        return None
    ratios = [1 + error(r, "trunk_s") for r in routed]
    off = [r for r, x in zip(routed, ratios) if abs(x - 1) > 0.03]
    return (
        f"routing='trunk' on SimGrid's FAT_TREE: {min(ratios):.3f}-{max(ratios):.3f}x SimGrid; "
        f"{len(off)} of {len(routed)} cases off by more than 3%"
    )


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
        print("\n".join(saved_simgrid(args.table)))
        note = trunk_note(json.load(open(args.table))["rows"])
        print(note or "", end="\n" if note else "")
        return
    unknown = [t for t in args.topologies.split(",") if t not in PLATFORMS]
    unknown += [a for a in args.algorithms.split(",") if a not in (*ALLREDUCE, *ROOTED)]
    if "crossbar" in args.topologies.split(",") and set(ROOTED) & set(args.algorithms.split(",")):
        raise SystemExit("simgrid_validation: gather and scatter on 'switch', not 'crossbar' (a crossbar has no NIC)")
    if unknown:
        raise SystemExit(
            f"simgrid_validation: unknown platform or algorithm {unknown[0]!r}: platforms "
            f"{', '.join(PLATFORMS)}; algorithms {', '.join((*ALLREDUCE, 'gather', 'scatter'))}"
        )
    reason = simgrid_available()
    if reason:
        raise SystemExit(f"simgrid_validation: {reason}")
    print(f"links {BANDWIDTH / 1e9:g} GB/s, {args.link_latency * 1e6:g} us each; gamma {GAMMA * 1e9:g} ns/B; "
          f"no software alpha; fat tree leaves of {args.leaf_size}, 2:1; SimGrid 3.32 CM02, factors 1")  # fmt: skip
    head = f"{'topology':<10}{'algorithm':<20}{'p':>5}{'bytes':>11}{'SimGrid s':>13}{'minidl/SG':>11}{'formula/SG':>12}"
    print(head + f"{'wall SG':>9}{'minidl':>8}")
    rows = run_cases(
        [int(p) for p in args.p.split(",")], args.topologies.split(","), args.algorithms.split(","),
        [int(n) for n in args.sizes.split(",")], args.link_latency, args.leaf_size, progress=print_row,
    )  # fmt: skip
    print("\n" + "\n".join(simgrid_table(rows)))
    print("\n" + simgrid_verdict(rows))
    if trunk_note(rows):
        print(trunk_note(rows))
    if args.json:
        command = "python benchmarks/simgrid_validation.py " + " ".join(sys.argv[1:])
        saved = {"date": time.strftime("%Y-%m-%d"), "command": command, "machine": machine(), "rows": rows}
        with open(args.json, "w") as f:
            json.dump(saved, f, indent=1)


if __name__ == "__main__":
    main()
