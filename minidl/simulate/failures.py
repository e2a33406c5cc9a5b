"""Node failures and checkpoints in virtual time: the fraction of a job lost, against the checkpoint interval.

    python -m minidl.simulate.failures --nodes 32,256 --node-mtbf-hours 8760 --checkpoint-cost 60

A job on N nodes, each failing independently at rate 1/M_node (exponential, memoryless), fails at rate
N/M_node: its mean time between failures is M = M_node / N (a node that fails once in a year makes a
256-node job fail every 34 hours). The job writes a checkpoint (cost C seconds) every tau seconds of work;
after a failure it restarts (cost R) from the last checkpoint and redoes the work since. To first order
(Young, "A first order approximation to the optimum checkpoint interval", 1974), the fraction of time lost is

    lost(tau) ~ C / tau  +  (tau / 2 + R) / M          (checkpoint overhead + rework and restart per failure)

minimal at the Young/Daly interval tau* = sqrt(2 C M) (Daly, "A higher order estimate of the optimum
checkpoint interval for restart dumps", 2006, refines it when C is not small against M). ``simulate`` draws
the failures and plays the job out, so the first-order formula can be checked against it.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


def young_daly_interval(checkpoint_cost: float, mtbf: float) -> float:
    """tau* = sqrt(2 C M): the checkpoint interval (seconds of work) that minimises the time lost."""
    if checkpoint_cost <= 0 or mtbf <= 0:
        raise ValueError(f"checkpoint cost and MTBF must be > 0, got {checkpoint_cost}, {mtbf}")
    return math.sqrt(2.0 * checkpoint_cost * mtbf)


def lost_first_order(interval: float, checkpoint_cost: float, mtbf: float, restart_cost: float = 0.0) -> float:
    """C / tau + (tau / 2 + R) / M: the first-order fraction of the job's time lost to checkpoints and failures."""
    return checkpoint_cost / interval + (interval / 2.0 + restart_cost) / mtbf


@dataclass
class Outcome:
    """One simulated job: wall-clock seconds, useful work seconds, failures suffered."""

    wall: float
    work: float
    failures: int

    @property
    def lost(self) -> float:
        """Fraction of the wall-clock time that was not useful work."""
        return 1.0 - self.work / self.wall


def simulate(
    work: float, interval: float, checkpoint_cost: float, mtbf: float, restart_cost: float = 0.0, seed: int = 0
) -> Outcome:
    """Play a job of ``work`` seconds out: segments of ``interval`` work then a checkpoint; a failure (exponential
    with mean ``mtbf``, during work or checkpoint) loses the segment and costs ``restart_cost``."""
    rng = np.random.default_rng(seed)
    wall, done, failures = 0.0, 0.0, 0
    next_failure = rng.exponential(mtbf)
    while done < work:
        segment = min(interval, work - done)
        needed = segment + (checkpoint_cost if done + segment < work else 0.0)  # no checkpoint after the last
        if wall + needed <= next_failure:
            wall, done = wall + needed, done + segment
            continue
        wall = next_failure + restart_cost  # the segment is lost; restart from the last checkpoint
        failures += 1
        next_failure = wall + rng.exponential(mtbf)
    return Outcome(wall, work, failures)


def table(
    nodes: Sequence[int], node_mtbf: float, checkpoint_cost: float, restart_cost: float, intervals: Sequence[float]
) -> list[str]:
    """Lines: per node count, the job MTBF, tau*, and the fraction lost (simulated and first-order) per interval."""
    lines = []
    for n in nodes:
        mtbf = node_mtbf / n
        best = young_daly_interval(checkpoint_cost, mtbf)
        lines.append(f"{n} nodes: job MTBF {mtbf / 3600:.1f} h, Young/Daly interval sqrt(2 C M) = {best / 60:.1f} min")
        for tau in sorted({*intervals, best}):
            sim = simulate(200 * mtbf, tau, checkpoint_cost, mtbf, restart_cost, seed=n)
            mark = "  <- sqrt(2 C M)" if tau == best else ""
            lines.append(
                f"  every {tau / 60:8.1f} min: lost {100 * sim.lost:5.1f}% simulated, "
                f"{100 * lost_first_order(tau, checkpoint_cost, mtbf, restart_cost):5.1f}% first order{mark}"
            )
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m minidl.simulate.failures", description=__doc__.splitlines()[0])
    p.add_argument("--nodes", default="32,256", help="node counts, comma-separated (default 32,256)")
    p.add_argument("--node-mtbf-hours", type=float, default=24 * 365.0, help="one node's MTBF (default a year)")
    p.add_argument("--checkpoint-cost", type=float, default=60.0, help="seconds to write a checkpoint (default 60)")
    p.add_argument("--restart-cost", type=float, default=120.0, help="seconds to restart a job (default 120)")
    p.add_argument("--intervals-min", default="5,15,30,60,120,240", help="checkpoint intervals in minutes")
    a = p.parse_args(argv)
    try:
        nodes = [int(x) for x in a.nodes.split(",")]
        intervals = [60.0 * float(x) for x in a.intervals_min.split(",")]
    except ValueError as e:
        raise SystemExit(f"python -m minidl.simulate.failures: error: {e}") from None
    if min(nodes) < 1 or min(intervals) <= 0 or a.node_mtbf_hours <= 0 or a.checkpoint_cost <= 0 or a.restart_cost < 0:
        raise SystemExit("python -m minidl.simulate.failures: error: nodes, intervals, MTBF and costs must be > 0")
    print("\n".join(table(nodes, a.node_mtbf_hours * 3600, a.checkpoint_cost, a.restart_cost, intervals)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
