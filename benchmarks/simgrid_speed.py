"""How fast the event engine simulates, against SimGrid replaying the same trace on the same platform.

    python benchmarks/simgrid_speed.py [--repeats 5]

Each case is one traced allreduce (collectives.virtual_time.trace), replayed by minidl's event engine
(replay.py, max-min fair flows of flows.py) and by SimGrid 3.32 (benchmarks/simgrid_oracle.py, run with the
system Python that has SimGrid's bindings) on the same links: 1.25 GB/s and 1 us each, shared as SimGrid's
CM02 shares them (by 1 / latency). Every run is a fresh process, the two interleaved, repeated. Columns:

    minidl replay   CPU seconds of the event engine on the traces (in its process: tracing left out)
    minidl all      CPU seconds of the process after its imports: tracing, building the network, replaying
    SimGrid run     CPU seconds of SimGrid's engine (its process_time around Engine.run and the platform)
    SimGrid all     CPU seconds of the SimGrid process, user and system, start-up and reading the trace included

Medians with min-max of --repeats runs, and the two engines' virtual times (they agree: the validation
tables in docs/simulator-validation.md). The default case is issue 35's: Rabenseifner at p = 1000 on a
10x10x10 torus, 4 MB a rank.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks.simgrid_validation import BANDWIDTH, GAMMA, ORACLE, SYSTEM_PYTHON, simgrid_available  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402
from minidl.tools.measure import busy_note, spread  # noqa: E402

LATENCY = 1e-6
CASES = {  # name: (algorithm, p, bytes a rank, torus dims)
    "rabenseifner-1000-torus": ("rabenseifner", 1000, 4_000_000, (10, 10, 10)),
    "ring-512-torus": ("ring", 512, 4_000_000, (8, 8, 8)),  # 2 minutes a repeat here
}
DEFAULT = "rabenseifner-1000-torus"

CHILD = """
import json, sys, time
import numpy as np
from collectives.cost import CostParams
from collectives.virtual_time import replay
from collectives.virtual_time.network import get_network
from collectives.virtual_time.trace import trace_rows
algorithm, p, nbytes, dims, bandwidth, latency, gamma = json.loads(sys.argv[1])
start = time.process_time()
traces = replay._traces(algorithm, p, nbytes, np.dtype(np.float32).str, False)
options = {"topology": "torus", "dims": tuple(dims), "link_latency": latency, "sharing": "rtt"}
fabric = get_network("crossbar", CostParams(0.0, 1 / bandwidth, gamma), **options).fabric(p)
replaying = time.process_time()
virtual = float(replay._Engine(traces, fabric).replay().time)
end = time.process_time()
print(json.dumps({"time": virtual, "replay_s": end - replaying, "all_s": end - start}))
"""


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_minidl(case: tuple) -> dict:
    algorithm, p, nbytes, dims = case
    argv = json.dumps([algorithm, p, nbytes, list(dims), BANDWIDTH, LATENCY, GAMMA])
    out = subprocess.run([sys.executable, "-c", CHILD, argv], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def simgrid_job(case: tuple) -> str:
    from collectives.virtual_time.trace import trace_rows

    algorithm, p, nbytes, dims = case
    spec = {"topology": "torus", "bandwidth": BANDWIDTH, "latency": LATENCY, "dims": list(dims), "limiter": False}
    traces = [[list(row) for row in rows] for rows in trace_rows(algorithm, p, nbytes)]
    return json.dumps({"platform": spec, "gamma": GAMMA, "traces": traces})


def run_simgrid(job: str) -> dict:
    before = children_cpu()
    out = subprocess.run([SYSTEM_PYTHON, ORACLE], input=job, capture_output=True, text=True, check=True)
    row = json.loads(out.stdout.strip().splitlines()[-1])
    return {**row, "all_s": children_cpu() - before}


def cell(values: list[float]) -> str:
    median, low, high = spread(values)
    return f"{median:6.2f} [{low:.2f}-{high:.2f}]"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--cases", default=DEFAULT, help=f"any of {', '.join(CASES)} (default {DEFAULT})")
    args = ap.parse_args()
    reason = simgrid_available()
    if reason:
        raise SystemExit(f"simgrid_speed: {reason}")
    unknown = [c for c in args.cases.split(",") if c not in CASES]
    if unknown:
        raise SystemExit(f"simgrid_speed: unknown case {unknown[0]!r}: expected any of {', '.join(CASES)}")
    print_header()
    print(f"links {BANDWIDTH / 1e9:g} GB/s, {LATENCY * 1e6:g} us each, shared by 1 / latency; CPU seconds, "
          f"medians [min-max] of {args.repeats} interleaved runs")  # fmt: skip
    print(f"{'case':<26}{'minidl replay':>20}{'minidl all':>20}{'SimGrid run':>20}{'SimGrid all':>20}{'virtual':>22}")
    for name in args.cases.split(","):
        case = CASES[name]
        job = simgrid_job(case)
        samples: dict[str, list[float]] = {"replay": [], "all": [], "sg run": [], "sg all": []}
        virtual = {}
        for _ in range(args.repeats):
            ours, theirs = run_minidl(case), run_simgrid(job)
            samples["replay"].append(ours["replay_s"])
            samples["all"].append(ours["all_s"])
            samples["sg run"].append(theirs["cpu_s"])
            samples["sg all"].append(theirs["all_s"])
            virtual = {"minidl": ours["time"], "SimGrid": theirs["time"]}
        ratio = virtual["minidl"] / virtual["SimGrid"]
        cells = "".join(f"{cell(v):>20}" for v in samples.values())
        print(f"{name:<26}{cells}{virtual['SimGrid'] * 1e3:>10.3f} ms x{ratio:.4f}")
        faster = spread(samples["sg run"])[0] / spread(samples["replay"])[0]
        print(f"  SimGrid's run / minidl's replay: {faster:.2f} ({busy_note(samples)})")


if __name__ == "__main__":
    main()
