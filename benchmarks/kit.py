"""The property-test kit at its default settings: how long a correct allreduce takes to pass, and how long
each bug of the catalogue (tests/kit_bugs) takes to be found and shrunk.

    python benchmarks/kit.py [--runs 3] [--bugs NAME ...]
    python benchmarks/kit.py --grade [--keep DIR] [--timeout 120]      # a class of 30, graded (issue 31)

Every run is ``collectives.testing.check(fn, collective, seed=s)`` with all else at the kit's defaults
(100 drawn examples after its 5 edge cases, p up to 16, a 20 s timeout per case, a space-time diagram
of the failure), run s using seed s = 0, 1, 2, ...: another seed draws other cases, so the spread is
luck in drawing as much as the machine. A bug's time is until PropertyFailure is raised: the
examples up to the first failure, the shrinking and the report. Printed per row: wall seconds as
median (min-max) over the runs, CPU seconds (the process's, all rank threads together: fairer on a
shared machine), the property the kit named and each run's shrunk p and n. Matplotlib and the kit
are imported by an untimed warm-up run. Entries of the catalogue that the kit misses (UNCAUGHT.md)
are timed too: their time is that of all 105 examples passing. The hang (polls_wrong_peer) runs at
the default 20 s timeout, which tests/test_kit_catalogue.py cuts to 1 s.

Target (issue 22): a correct allreduce passes in at most a minute on 2 cores.

``--grade`` times a grading run (``python -m collectives.check --grade``, collectives/kit/grade.py) of a
class of 30 HW3 submissions, a ring allreduce in a course's signature and contract (``--signature
send,recv,comm,op --dtypes float64 --ops sum --min-n p``, the kit's other settings at their defaults): every
allreduce of tests/kit_students/MANIFEST.json written to that signature, each copied into a folder of its own
as hw3.py under an anonymous name (s01..s30, in a seeded shuffle), and as many generated ones as it takes
to reach 30 (GENERATED: two more correct rings, and the ways out a grading run must survive: a syntax
error, an exception at import, os._exit, an endless loop, a flood of output, a result never written).
Printed: the machine, the table with each submission's source, its TA verdict and its wall and CPU
seconds, whether the kit agreed with the TA, and the median wall seconds of the correct submissions.

Target (issue 31): a correct submission takes a median of at most 10 s on 2 cores.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

from harness import median_spread

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from kit_bugs import CATALOGUE, ring_bugs  # noqa: E402

from collectives import ring  # noqa: E402
from collectives.testing import PropertyFailure, check  # noqa: E402
from minidl.tools.info import header_lines, machine_facts  # noqa: E402

TARGET_S = 60.0
GRADE_TARGET_S = 10.0
COURSE = ["--signature", "send,recv,comm,op", "--dtypes", "float64", "--ops", "sum", "--min-n", "p"]
STUDENTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "kit_students")
CLASS_SIZE = 30
RING_SPLIT = """import numpy as np


def allreduce(send, recv, comm, op):
    p, r = comm.Get_size(), comm.Get_rank()
    blocks = np.array_split(send.copy(), p)  # views into one copy: block i is reduced in place
    tmp = np.empty(len(blocks[0]), send.dtype)
    for s in range(p - 1):  # reduce-scatter: after it, block r + 1 is complete here
        out, into = blocks[(r - s) % p], blocks[(r - s - 1) % p]
        comm.Sendrecv(out, dest=(r + 1) % p, recvbuf=tmp[: len(into)], source=(r - 1) % p)
        into[:] = op(into, tmp[: len(into)])
    for s in range(p - 1):  # allgather
        out, into = blocks[(r + 1 - s) % p], blocks[(r - s) % p]
        comm.Sendrecv(out, dest=(r + 1) % p, recvbuf=into, source=(r - 1) % p)
    recv[:] = np.concatenate(blocks) if blocks else send
"""
NAIVE = """import numpy as np


def allreduce(send, recv, comm, op):
    p, r = comm.Get_size(), comm.Get_rank()
    if r == 0:  # gather to rank 0 and reduce in rank order, then send the total back
        total = send.copy()
        part = np.empty_like(send)
        for src in range(1, p):
            comm.Recv(part, source=src)
            total = op(total, part)
        for dst in range(1, p):
            comm.Send(total, dest=dst)
        recv[:] = total
    else:
        comm.Send(send, dest=0)
        comm.Recv(recv, source=0)
"""
GENERATED = [  # (name, source, TA verdict, the property it must fail or what a grading run must make of it)
    ("gen_ring_array_split", RING_SPLIT, "correct", ""),
    ("gen_naive_root", NAIVE, "correct", ""),
    ("gen_syntax_error", NAIVE.replace("def allreduce(send, recv, comm, op):", "def allreduce(send, recv, comm, op)"),
     "buggy", "not loaded"),
    ("gen_import_raises", "import hw3_helpers  # not submitted\n" + NAIVE, "buggy", "not loaded"),
    ("gen_os_exit", NAIVE.replace("    p, r =", "    import os\n\n    os._exit(1)\n    p, r ="), "buggy", ""),
    ("gen_endless", NAIVE.replace("    p, r =", "    while True:\n        pass\n    p, r ="), "buggy",
     "completes|timed out"),
    ("gen_flood", NAIVE.replace("    p, r =", "    while True:\n        print(send)\n    p, r ="), "buggy", "flooded"),
    ("gen_no_recv", "def allreduce(send, recv, comm, op):\n    return op(send, send)  # recv never written\n",
     "buggy", "result"),
]  # fmt: skip


def one_run(fn: Any, collective: str, seed: int, **kwargs: Any) -> tuple[float, float, str]:
    """(wall s, CPU s, what happened) for one check at the default settings but the seed."""
    t0, c0 = time.perf_counter(), time.process_time()
    try:
        report = check(fn, collective, seed=seed, **kwargs)
        what = f"passed {report.examples}"
    except PropertyFailure as failure:
        what = f"{failure.property} p={failure.case.p} n={failure.case.n}"
    return time.perf_counter() - t0, time.process_time() - c0, what


def row(name: str, runs: list[tuple[float, float, str]]) -> str:
    walls, cpus = [r[0] for r in runs], [r[1] for r in runs]
    found = {r[2].split()[0] for r in runs}
    shrunk = "; ".join(" ".join(r[2].split()[1:]) for r in runs)
    return f"{name:36} {median_spread(walls):>18} {statistics.median(cpus):8.1f}  {'/'.join(sorted(found)):17} {shrunk}"


def _named(entry: dict) -> str:
    """The properties a buggy file of the manifest may be failed for, '|'-separated ('' for a correct one)."""
    return "|".join([entry.get("property") or ""] + list(entry.get("also") or [])).strip("|")


def build_class(folder: str, seed: int = 31) -> dict[str, tuple[str, str, str]]:
    """A class of CLASS_SIZE in ``folder``: sNN/hw3.py each; {sNN: (source, TA verdict, property)}."""
    with open(os.path.join(STUDENTS, "MANIFEST.json")) as f:
        manifest = json.load(f)["files"]
    chosen = [
        (e["file"][:-3], open(os.path.join(STUDENTS, e["file"])).read(), e["verdict"], _named(e))
        for e in manifest
        if e["collective"] == "allreduce" and e["signature"] == "send,recv,comm,op" and "sum" in e["contract"]["ops"]
    ]
    chosen = (chosen + GENERATED)[:CLASS_SIZE]
    order = random.Random(seed).sample(range(len(chosen)), len(chosen))
    key = {}
    for k, i in enumerate(order, start=1):
        name, source, verdict, prop = chosen[i]
        os.makedirs(os.path.join(folder, f"s{k:02d}"))
        with open(os.path.join(folder, f"s{k:02d}", "hw3.py"), "w") as f:
            f.write(source)
        key[f"s{k:02d}"] = (name, verdict, prop)
    return key


def grade_class(args: argparse.Namespace) -> None:
    """Grade a class of 30 through the command line, as an instructor would, and time it."""
    root = args.keep or tempfile.mkdtemp(prefix="minidl-kit-class-")
    key = build_class(os.path.join(root, "hw3"))
    print(f"{len(key)} submissions in {root}/hw3: " + ", ".join(f"{k} {v[0]}" for k, v in key.items()))
    cmd = [sys.executable, "-m", "collectives.check", "--grade", os.path.join(root, "hw3"), "--file", "hw3.py"]
    cmd += ["--collective", "allreduce", *COURSE, "--timeout", f"{args.timeout:g}", "--json", f"{root}/grades.json"]
    print("$ " + " ".join(cmd[1:]), flush=True)
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True)  # its progress lines and table, then ours with the sources
    total = time.perf_counter() - t0
    with open(os.path.join(root, "grades.json")) as f:
        rows = json.load(f)
    print(f"\n{'':4}{'source':24} {'TA':8} {'verdict':11} {'property':24} {'wall s':>7} {'CPU s':>6}  agrees")
    agree, correct_wall, correct_cpu = 0, [], []
    for r in rows:
        source, verdict, prop = key[r["submission"]]
        named = not prop or bool({r["property"], r["verdict"]} & set(prop.split("|")))
        ok = r["passed"] == (verdict == "correct") and named
        agree += ok
        if verdict == "correct" and r["passed"]:
            correct_wall.append(r["seconds"])
            correct_cpu.append(r["cpu_seconds"])
        print(f"{r['submission']:4}{source:24} {verdict:8} {r['verdict']:11} {r['property'][:24]:24} "
              f"{r['seconds']:7.1f} {r['cpu_seconds']:6.1f}  {'yes' if ok else 'NO'}")  # fmt: skip
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"\nthe kit agreed with the TA on {agree} of {len(rows)}; the run took {total:.0f} s (load average {load})")
    if correct_wall:
        med = statistics.median(correct_wall)
        verdict = "met" if med <= GRADE_TARGET_S else "NOT met"
        print(f"correct submissions: wall s {median_spread(correct_wall)}, CPU s {median_spread(correct_cpu)}; "
              f"target median <= {GRADE_TARGET_S:.0f} s on 2 cores: {verdict}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3, help="runs per row, with seeds 0, 1, ...")
    parser.add_argument("--bugs", nargs="*", help="only these bugs of the catalogue (default: all)")
    parser.add_argument("--grade", action="store_true", help="time the grading run of a class of 30 instead")
    parser.add_argument("--keep", default=None, help="with --grade: build the class here (default: a temporary folder)")
    parser.add_argument("--timeout", type=float, default=120.0, help="with --grade: seconds per submission")
    args = parser.parse_args()
    print("\n".join(header_lines(machine_facts(None))))
    if args.grade:
        print(f"load average {', '.join(f'{v:.1f}' for v in os.getloadavg())}")
        grade_class(args)
        return
    load = ", ".join(f"{v:.1f}" for v in os.getloadavg())
    print(f"load average {load}; {args.runs} runs per row, seeds 0..{args.runs - 1}")
    one_run(ring_bugs.send_then_recv, "allreduce", 0)  # warm-up: imports, the first diagram
    print(f"\n{'check':36} {'wall s med (min-max)':>18} {'CPU s':>8}  {'property':17} shrunk to, per run")
    seeds = range(args.runs)
    passes = [one_run(ring.allreduce, "allreduce", s) for s in seeds]
    print(row("ring.allreduce (correct)", passes))
    for bug in CATALOGUE:
        if args.bugs and bug.name not in args.bugs:
            continue
        label = bug.name + (" (uncaught)" if bug.uncaught else "")
        settings = {k: v for k, v in bug.kwargs.items() if k != "timeout"}  # the kit's own 20 s, not the test's
        print(row(label, [one_run(bug.fn, bug.collective, s, **settings) for s in seeds]), flush=True)
    worst = max(r[0] for r in passes)
    verdict = "met" if worst <= TARGET_S else "NOT met"
    print(f"\ncorrect allreduce: slowest pass {worst:.1f} s; target <= {TARGET_S:.0f} s on 2 cores: {verdict}")


if __name__ == "__main__":
    main()
