"""The simulated cluster (``python -m minidl.simulate``) against real runs here, and against the articles.

1. **Here** (``--part here``): calibrate alpha, beta, gamma under ``mpiexec -n p`` for p = 2..4, then measure
   the words/s of ``python -m minidl.train lm --parallel data`` (the demo preset, ring allreduce) at p = 1..4
   (real ``mpiexec`` runs; medians of interleaved repeats, with their spread), and print them beside the
   simulator's prediction from a profile of one rank measured right before each run. This machine is one node of
   ``nproc`` cores; a rank runs one BLAS thread and busy-polls while it waits in MPI, keeping its core, so the
   slowest of p ranks beside L other runnable tasks (sampled from /proc/stat during the profile and the run) gets
   1 / ceil((p + L) / c) of a core (minidl/simulate/node.py); ranks running at once on several cores cost each
   other the node's efficiency (measured once a repeat: one profile alone against one per core at once); the
   calibrated alpha, beta, gamma at p are the link within the node. The words/s are the trainer's after its
   first log interval (steady steps, as simulated). "no-load model": the same prediction with L = 0. Then
   where a step's time goes, measured (rank 0's DistributedOptimizer clock) and predicted. ``--json FILE``
   saves the runs (benchmarks/validation_tables.py prints them; tutorial 08 shows them).
2. **The articles** (``--part articles``), each a question the simulator answers:
   (a) "Deep Learning: massively scaled parallel approach using hybrid supercomputers" (Medium, 2017): an LSTM LM
       on PTB on 1..32 CPU nodes of 28 cores, ~200 words/s per node, ~3,000 on 32 (~15x). Which network and
       allreduce give that shape, for each of Zaremba's models (profiled here, scaled to 200 words/s per node)?
   (b) Illuminate, "Evaluating Parallel AI Training Using an HPC Facility" (EPCC Cirrus, c. 2020): Horovod at 80%
       efficiency on 16 GPUs (4 nodes x 4 V100, 54.5 Gb/s InfiniBand = FDR). The article gives no throughput, so
       we solve for it: how many images/s per GPU (batch 64) a 25.6 M-parameter (ResNet-50-sized) gradient, and
       the article's own >7 M-parameter network, allow before efficiency at 16 falls below 80%.
   (c) Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure" (The Next Platform, 2018): ResNet-50 with
       Horovod on up to 256 Skylake nodes of Dell's Zenith (Omni-Path 100, one non-blocking switch). The step is
       minidl's own ResNet-50 (``minidl.models.resnet50()``, batch 32 at 224x224, the 8k global batch at 256
       nodes) measured on one core here, on a node of 40 cores with half the ideal speed-up from them
       (``--zenith-efficiency``). Or, with ``--resnet50-rate R``, a described node of R images/s (100 is
       ResNet-50's 3.8 G multiply-adds per image forward (He et al. 2016) x 3 for training ~ 23 GFLOP; two 20-core
       Xeon Gold 6148 at ~5 TFLOP/s fp32 peak, ~50% of it). Dell's own Intel Caffe runs on Zenith (Filby &
       Dandapanthula, "Deep Learning Performance with Intel Caffe", Dell EMC, 2018) scaled at 90% to 128 nodes and
       83% at 256: printed beside the simulation.

    python benchmarks/simulate_validation.py                  # both parts (a few minutes)
    python benchmarks/simulate_validation.py --part here --repeats 5 --steps 200
    python benchmarks/simulate_validation.py --part articles --quick
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, replace

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"  # before NumPy loads its BLAS: one core per rank

import numpy as np  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from benchmarks import validation_tables  # noqa: E402
from collectives.cost import load_params  # noqa: E402
from collectives.paths import check_output  # noqa: E402
from minidl.simulate import (  # noqa: E402
    Cluster,
    NodeSpec,
    Scheme,
    TaskOptions,
    Variation,
    described,
    profile_task,
    scaling,
    simulate_step,  # noqa: E402
)
from minidl.simulate.node import share as node_share  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402
from minidl.tools.measure import busy_note  # noqa: E402


# ----------------------------------------------------------------------------- 1. here
def mpiexec() -> str:
    found = shutil.which("mpiexec", path=os.path.dirname(sys.executable)) or shutil.which("mpiexec")
    if not found:
        raise SystemExit("simulate_validation: mpiexec not found (pip install mpich)")
    return found


def run(cmd: list[str], timeout: float) -> str:
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    if out.returncode != 0:
        sys.stderr.write(out.stdout[-2000:] + out.stderr[-2000:])
        raise SystemExit(f"simulate_validation: {' '.join(cmd[:6])} ... failed (exit {out.returncode})")
    return out.stdout


def calibrate(p: int, path: str) -> None:
    """alpha, beta, gamma measured among p ranks here (``python -m collectives.virtual_time.calibrate --cold``: each
    exchange after compute, as a training step makes it), saved to ``path``."""
    cmd = [mpiexec(), "-n", str(p), sys.executable, "-m", "collectives.virtual_time.calibrate", "--out", path, "--cold"]
    run(cmd, 600)


RATE = re.compile(r"steps in [\d:]+(?: on \d+ ranks)?, ([\d,]+) words/s")


@dataclass
class Run:
    """One real run: its words/s over the steps after the first log interval (steady, like the simulated step),
    the trainer's own overall figure (from its start, the first steps' warm-up included), and rank 0's mean
    seconds per step of compute / wait / communication over the same steps (``DistributedOptimizer``'s clock)."""

    rate: float
    overall: float
    split: dict[str, float]


def measured_run(p: int, steps: int, log_every: int) -> Run:
    """``mpiexec -n p python -m minidl.train lm --parallel data`` (serial at p = 1), read from its ``--log-json``."""
    with tempfile.TemporaryDirectory() as tmp:
        log = os.path.join(tmp, "log.json")
        cmd = [sys.executable, "-m", "minidl.train", "lm", "--preset", "demo", "--max-steps", str(steps)]
        cmd += ["--log-every", str(log_every), "--log-json", log]
        if p > 1:
            cmd = [mpiexec(), "-n", str(p), *cmd, "--parallel", "data", "--allreduce", "ring"]
        out = run(cmd, 900)
        with open(log) as f:
            records = [r for r in map(json.loads, f) if r.get("kind") == "train"]
    found = RATE.findall(out)
    if len(records) < 2 or not found:
        raise SystemExit(f"simulate_validation: the trainer logged {len(records)} intervals; use more --steps")
    steady = records[1:]  # the first interval holds the warm-up step
    steps_in = [b["step"] - a["step"] for a, b in zip(records, steady)]
    rate = sum(steps_in) / sum(n / r["words_per_s"] for n, r in zip(steps_in, steady))  # total words / total time
    split = {k: float(np.mean([r[k] or 0.0 for r in steady])) for k in ("comp_s", "wait_s", "comm_s")}
    return Run(rate, float(found[-1].replace(",", "")), split)


class LoadSampler:
    """The runnable tasks of this machine (/proc/stat's procs_running) every ``every`` s while it is open."""

    def __init__(self, every: float = 0.05):
        self.every, self.samples, self._stop = every, [], threading.Event()

    def __enter__(self) -> LoadSampler:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            with open("/proc/stat") as f:
                line = next(line for line in f if line.startswith("procs_running"))
            self.samples.append(int(line.split()[1]))

    def others(self, mine: int) -> float:
        """The mean of the runnable tasks that are not ``mine`` (this sampler counts itself)."""
        return max(0.0, float(np.mean(self.samples or [mine + 1])) - mine - 1)


def profiled(steps: int):
    """One rank's profile of the demo preset at its mean step (the load is modelled, so none is refused)."""
    return profile_task("lm", TaskOptions(preset="demo", steps=steps, max_spread=None)).at_mean()


def between(before, after):
    """The two profiles taken around a real run, averaged: the machine's pace drifts by 10-20% from one minute to
    the next, so one profile before the run can miss the pace the run saw."""
    mean = (before.compute_s + after.compute_s) / 2
    return replace(before.scaled(before.compute_s / mean), step_cv=(before.step_cv + after.step_cv) / 2)


PROFILE_CHILD = """
import os, sys, time
if sys.argv[3] != "-":
    os.sched_setaffinity(0, {int(sys.argv[3])})  # pinned to one core
from minidl.simulate import TaskOptions, profile_task
start, steps = float(sys.argv[1]), int(sys.argv[2])
time.sleep(max(0.0, start - time.time()))  # every copy starts at once, after its imports
profile = profile_task("lm", TaskOptions(preset="demo", steps=steps, max_spread=None))
print(profile.at_mean().compute_s)
"""


def at_once(pins: list[str], steps: int) -> float:
    """The mean step of profiles started together, one per entry of ``pins`` (a core to pin it to, or "-")."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    start = time.time() + 3.0  # time for the imports
    cmds = [[sys.executable, "-c", PROFILE_CHILD, str(start), str(steps), pin] for pin in pins]
    children = [subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT) for cmd in cmds]
    return float(np.mean([float(c.communicate(timeout=300)[0].split()[-1]) for c in children]))


def node_factors(cores: int, steps: int) -> tuple[float, float]:
    """The node's NodeSpec.efficiency and .sharing, measured: one profile's mean step alone, over its step while
    every core runs one (what ranks on different cores cost each other), and twice it over the step of each of
    two profiles pinned to one core (what time-sharing a core costs beyond the halving)."""
    alone = at_once(["-"], steps)
    every_core = at_once(["-"] * cores, steps) if cores > 1 else alone
    one_core = at_once(["0", "0"], steps)
    return min(1.0, alone / every_core), min(1.0, 2 * alone / one_core)


def predict(profile, p: int, params, cores: int, load_profile: float, load_run: float, node: tuple[float, float]):
    """The simulated step of p single-threaded ranks on one node of ``cores`` cores beside ``load_run`` other
    tasks (ranks busy-poll: always runnable), with the calibrated ``params``, the node's measured ``eff`` where
    ranks run on several cores at once and its ``sharing`` where they time-share one (``node``), and each rank's
    step varying as the profiled steps did (its CV as
    ``--jitter``: the step waits for the slowest rank); the profile, measured beside ``load_profile`` other
    tasks, first brought to the run's load (node.py's share)."""
    profile = profile.scaled(node_share(1 + load_run, cores) / node_share(1 + load_profile, cores))
    eff, sharing = node
    spec = NodeSpec(p, cores, efficiency=eff if min(p, cores) > 1 else 1.0, load=load_run, sharing=sharing)
    scheme = Scheme("data", "ring", variation=Variation(jitter=profile.step_cv))
    return simulate_step(spec.apply(profile), Cluster(1, "crossbar", spec, params), scheme=scheme)


def part_here(args: argparse.Namespace) -> None:
    cores, ranks = os.cpu_count() or 1, [1, 2, 3, 4]
    params = {}
    with tempfile.TemporaryDirectory() as tmp:
        for p in ranks[1:]:
            calibrate(p, os.path.join(tmp, f"calib{p}.json"))
            params[p] = load_params(os.path.join(tmp, f"calib{p}.json"))
    for p, c in params.items():
        print(
            f"calibrated at p={p}: alpha {1e6 * c.alpha:.1f} us, beta {1e9 * c.beta:.3f} ns/B, gamma {1e9 * c.gamma:.3f} ns/B"
        )
    rows = {
        p: {"measured": [], "predicted": [], "no_load": [], "other_tasks": [], "split": [], "model": []} for p in ranks
    }
    effs = []  # (efficiency, sharing) of each repeat
    for _ in range(args.repeats):  # interleaved: a busy neighbour hits every p alike
        effs.append(node_factors(cores, args.profile_steps))
        for p in ranks:  # the profile right before the run it predicts: both see the same load
            with LoadSampler() as before:
                first = profiled(args.profile_steps)
            with LoadSampler() as during:
                real = measured_run(p, args.steps, args.log_every)
            profile = between(first, profiled(args.profile_steps))
            row, load = rows[p], during.others(p)
            t = predict(profile, p, params.get(p), cores, before.others(1), load, effs[-1])
            flat = predict(profile, p, params.get(p), cores, 0.0, 0.0, effs[-1])
            row["measured"].append(real.rate)
            row["predicted"].append(p * profile.items / t.step_s)
            row["no_load"].append(p * profile.items / flat.step_s)
            row["other_tasks"].append(load)
            row["split"].append(real.split)
            row["model"].append({"compute_s": t.compute_s, "comm_s": t.comm_s})
    report(args, cores, ranks, rows, effs, profile.items)
    if args.json:
        save(args, cores, rows, effs, params)


def report(args, cores: int, ranks: list[int], rows: dict, effs: list[float], items: int) -> None:
    """The comparison (benchmarks/validation_tables.py's table), the no-load model, and where a step's time goes;
    ``items``: words per rank per step."""
    print(
        f"\nLSTM LM demo preset, --parallel data --allreduce ring, {args.steps} steps per run (words/s after the "
        f"first {args.log_every}), medians of {args.repeats} interleaved repeats [min-max]; this machine: 1 node, "
        f"{cores} cores"
    )
    for i, name in enumerate((f"efficiency ({cores} ranks at once)", "sharing (2 ranks time-sharing a core)")):
        v = [e[i] for e in effs]
        print(f"node {name}: {np.median(v):.2f} [{min(v):.2f}-{max(v):.2f}]")
    table = validation_tables.here_table([{"p": p, **rows[p]} for p in ranks])  # the docs' and tutorial's printer
    print("\n".join(table))
    flat = ", ".join(f"p={p} {np.median(rows[p]['no_load']) / np.median(rows[p]['measured']):.2f}x" for p in ranks)
    print(f"no-load model (other tasks taken as 0), pred./meas.: {flat}")
    print(
        "\nwhere a step's time goes, ms (medians; measured: rank 0's DistributedOptimizer clock, compute includes the"
    )
    print("update and the trainer's stop agreement; wait: the step agreement, where a rank waits for the slowest)")
    print(
        f"{'p':>3}{'measured: compute':>19}{'wait':>7}{'comm':>7}{'step':>7}   {'predicted: compute':>18}{'comm':>7}{'step':>7}"
    )
    for p in ranks[1:]:
        r = rows[p]
        m = {k: 1e3 * np.median([s[k] for s in r["split"]]) for k in ("comp_s", "wait_s", "comm_s")}
        c, x = (1e3 * np.median([s[k] for s in r["model"]]) for k in ("compute_s", "comm_s"))
        step = 1e3 * p * items / np.median(r["measured"])
        print(
            f"{p:>3}{m['comp_s']:>19.1f}{m['wait_s']:>7.1f}{m['comm_s']:>7.1f}{step:>7.1f}   {c:>18.1f}{x:>7.1f}{c + x:>7.1f}"
        )
    note = busy_note({str(p): r["measured"] for p, r in rows.items()})
    print(f"measured: {note}; other runnable tasks (median of the runs) beside the ranks shown; "
          f"load average now {os.getloadavg()[0]:.1f} on {cores} cores")  # fmt: skip
    others = max(np.median(r["other_tasks"]) for r in rows.values())
    if "busy" in note and others >= 0.5:
        print("note: the machine was too loaded to hold the prediction to 10%: the repeats alone vary by more")
    elif "busy" in note:
        print("note: the repeats spread by more than 20% though no other task ran (this machine's pace drifts from one "
              "minute to the next): compare the medians, not single repeats")  # fmt: skip


def save(args, cores: int, rows: dict, effs: list[float], params: dict) -> None:
    """The runs as benchmarks/validation_tables.py reads them (docs/data/simulate_validation_here.json)."""
    from minidl.tools.info import machine_facts

    facts = machine_facts()
    cpu = facts.get("cpu", {})
    blas = (facts.get("blas") or [{}])[0]
    record = {
        "date": time.strftime("%Y-%m-%d %H:%M"),
        "command": "python benchmarks/simulate_validation.py " + " ".join(sys.argv[1:]),
        "machine": f"{cpu.get('model', '?')}, {cores} cores, {blas.get('internal_api', '?')} "
        f"{blas.get('architecture', '?')} kernel, load average {os.getloadavg()[0]:.1f} at the end",
        "efficiency": [e[0] for e in effs],
        "sharing": [e[1] for e in effs],
        "calibration": {str(p): {"alpha": c.alpha, "beta": c.beta, "gamma": c.gamma} for p, c in params.items()},
        "rows": [{"p": p, **r} for p, r in rows.items()],
    }
    with open(args.json, "w") as f:
        json.dump(record, f, indent=1)
    print(f"saved to {args.json}")


# ----------------------------------------------------------------------------- 2. the articles
NODES_32 = [1, 2, 4, 8, 16, 32]


def article_ptb(args: argparse.Namespace) -> None:
    """(a) Which network and allreduce make Zaremba's LM at 200 words/s per 28-core node scale ~15x at 32 nodes."""
    models = ["small"] if args.quick else ["small", "medium", "large"]
    print('\n(a) "Deep Learning: massively scaled parallel approach using hybrid supercomputers" (Medium, 2017)')
    print("    28-core nodes at 200 words/s each (the article's); speed-up at 32 nodes; the article: ~15x")
    print(f"{'model':<8}{'params MB':>10}{'core speed':>12}  {'network':<9}{'ring':>8}{'tree':>8}{'rabens.':>9}")
    matches = []
    for model in models:
        profile = profile_task("lm", TaskOptions(preset=model, steps=1 if args.quick else 2))
        here = profile.items / profile.compute_s  # words/s of one core here
        node = NodeSpec(cores=28, core_speed=200 / (28 * here))
        for network in args.networks.split(","):
            s32 = {}
            for algorithm in ("ring", "tree", "rabenseifner"):
                rows = scaling(profile, NODES_32, algorithm, network, node)
                s32[algorithm] = rows[-1].speedup
                if abs(rows[-1].speedup - 15) <= 1.5 and all(
                    a.per_node_rate >= b.per_node_rate for a, b in zip(rows, rows[1:])
                ):
                    matches.append(
                        f"{model} ({profile.gradient_bytes / 1e6:.0f} MB of gradients) on {network} with {algorithm}: {rows[-1].speedup:.1f}x, {rows[-1].rate:,.0f} words/s"
                    )
            print(
                f"{model:<8}{profile.gradient_bytes / 1e6:>10.1f}{node.core_speed:>12.3g}  {network:<9}"
                + "".join(f"{s32[a]:>8.1f}x" for a in ("ring", "tree", "rabenseifner"))
            )
    print("    reproduce ~15x (13.5-16.5) with per-node words/s falling as nodes are added:")
    for line in matches or ["none of these"]:
        print(f"      {line}")


def efficiency_vs_one_rank(profile, ranks: int, per_node: int, network: str, algorithm: str, overlap: bool) -> float:
    """rate on ``ranks`` ranks (``per_node`` per node) / (ranks x the rate of one rank alone)."""
    node = NodeSpec(ranks_per_node=per_node)
    t = simulate_step(profile, Cluster(ranks // per_node, network, node), algorithm, overlap)
    return profile.compute_s / t.step_s


def solve_rate(params: float, batch: int, target: float, **kw) -> float:
    """The largest items/s per rank at which the efficiency is still >= target (bisection in log space)."""
    lo, hi = 1e-2, 1e6
    for _ in range(60):
        mid = np.sqrt(lo * hi)
        ok = efficiency_vs_one_rank(described(params, mid, batch), **kw) >= target
        lo, hi = (mid, hi) if ok else (lo, mid)
    return lo


def article_cirrus(args: argparse.Namespace) -> None:
    print('\n(b) Illuminate, "Evaluating Parallel AI Training Using an HPC Facility" (EPCC Cirrus, c. 2020)')
    print(f"    16 GPUs = 4 nodes x 4 on {args.cirrus_network}, batch 64 per GPU: the most images/s per GPU that")
    print("    still gives >= 80% efficiency over one GPU (the article's Horovod result)")
    print(f"{'gradient':<34}{'allreduce':<14}{'no overlap':>12}{'overlap':>10}")
    for label, params in (("ResNet-50 size, 25.6 M parameters", 25.6e6), ("the article's network, 7 M", 7e6)):
        for algorithm in ("ring", "tree"):
            kw = dict(ranks=16, per_node=4, network=args.cirrus_network, algorithm=algorithm)
            rates = [solve_rate(params, 64, 0.8, overlap=o, **kw) for o in (False, True)]
            print(f"{label:<34}{algorithm:<14}{rates[0]:>12,.0f}{rates[1]:>10,.0f}")


def zenith_step(args: argparse.Namespace):
    """(c)'s profile and node: minidl's ResNet-50 measured here on a 40-core node, or a described --resnet50-rate."""
    if args.resnet50_rate:
        text = f"ResNet-50 (25.6 M parameters) at {args.resnet50_rate:g} images/s per node (assumed), batch 32"
        return described(25.6e6, args.resnet50_rate, 32, source="ResNet-50 on a 2 x 20-core Skylake node"), None, text
    size, batch = (32, 4) if args.quick else (224, 32)
    profile = profile_task(
        "cnn", TaskOptions(model="resnet50", image=size, batch_size=batch, steps=1 if args.quick else 2)
    )
    node = NodeSpec(cores=40, efficiency=args.zenith_efficiency)
    rate = profile.items / profile.compute_s * 40 * args.zenith_efficiency
    text = (
        f"minidl's ResNet-50 measured here ({size}x{size}, batch {batch}: {profile.items / profile.compute_s:.2f}"
        f" images/s on one core), a 40-core node at efficiency {args.zenith_efficiency:g}: {rate:.1f} images/s"
    )
    return profile, node, text


def article_zenith(args: argparse.Namespace) -> None:
    nodes = [1, 4, 16, 64, 128, 256]
    print('\n(c) Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure" (The Next Platform, 2018)')
    profile, node, text = zenith_step(args)
    print(f"    {text}, {args.zenith_network}")
    print("    Dell's Intel Caffe on the same cluster: 90% at 128 nodes, 83% at 256")
    print(f"{'allreduce':<14}{'overlap':<9}" + "".join(f"{n:>8}" for n in nodes))
    for algorithm in ("ring", "tree", "rabenseifner"):
        for overlap in (False, True):
            rows = scaling(profile, nodes, algorithm, args.zenith_network, node, overlap=overlap)
            print(f"{algorithm:<14}{str(overlap):<9}" + "".join(f"{100 * r.efficiency:>7.0f}%" for r in rows))
    rate = solve_rate(
        25.6e6, 32, 0.83, ranks=256, per_node=1, network=args.zenith_network, algorithm="ring", overlap=False
    )
    print(f"    83% at 256 nodes (ring, no overlap) holds up to {rate:,.0f} images/s per node")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=("here", "articles", "all"), default="all")
    ap.add_argument("--repeats", type=int, default=5, help="interleaved repeats of every measurement (median)")
    ap.add_argument("--steps", type=int, default=200, help="training steps per real run")
    ap.add_argument("--profile-steps", type=int, default=30, help="steps of each profile (one before, one after a run)")
    ap.add_argument("--log-every", type=int, default=25, help="the trainer's log interval (the first is warm-up)")
    ap.add_argument("--json", default=None, help="save the real runs here (docs/data/simulate_validation_here.json)")
    ap.add_argument("--networks", default="1gbe,10gbe,25gbe,ib-fdr", help="(a): networks to try")
    ap.add_argument("--cirrus-network", default="ib-fdr")
    ap.add_argument("--zenith-network", default="omnipath100")
    ap.add_argument("--resnet50-rate", type=float, help="(c): assume this many images/s per node (e.g. 100)")
    ap.add_argument("--zenith-efficiency", type=float, default=0.5, help="(c): a 40-core node's share of ideal")
    ap.add_argument("--quick", action="store_true", help="1 repeat, 30 steps, the small model only")
    args = ap.parse_args()
    check_output("--json", args.json, ap.prog)  # its folder made, before the runs
    print_header(quick=args.quick)
    if args.quick:
        args.repeats, args.steps, args.profile_steps = 1, 30, 3
    if args.part in ("here", "all"):
        part_here(args)
    if args.part in ("articles", "all"):
        article_ptb(args)
        article_cirrus(args)
        article_zenith(args)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(
        f"\npeak RSS: this process {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB, largest child {children:.0f} MB"
    )


if __name__ == "__main__":
    main()
