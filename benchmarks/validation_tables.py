"""The virtual-time cluster's validation tables, from saved runs: one printer for the benchmarks, docs and tutorial 08.

Two tables, as the simulators that publish validation tables show theirs (docs/simulator-validation.md):

1. against SimGrid: |minidl / SimGrid - 1| per p, over all topologies and per topology, from the rows of
   ``benchmarks/simgrid_validation.py --json FILE`` (saved in docs/data/simgrid_validation.json);
2. against real runs here: the measured and predicted words/s per p, from
   ``benchmarks/simulate_validation.py --part here --json FILE`` (saved in docs/data/simulate_validation_here.json).

A saved file is ``{"date": str, "command": str, "machine": str, "rows": [...]}`` (SimGrid rows saved before the
header existed are a bare list of rows). Where a file is absent, its printer says in one line how to make it.

    python benchmarks/validation_tables.py                       # both tables from docs/data/
    python benchmarks/validation_tables.py --simgrid rows.json --here here.json
"""

from __future__ import annotations

import argparse
import json
import os
from typing import Any

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SIMGRID_FILE = os.path.join(ROOT, "docs", "data", "simgrid_validation.json")
HERE_FILE = os.path.join(ROOT, "docs", "data", "simulate_validation_here.json")
SIMGRID_COMMAND = "python benchmarks/simgrid_validation.py --p 8,24,64,100,256 --json docs/data/simgrid_validation.json"
HERE_COMMAND = "python benchmarks/simulate_validation.py --part here --json docs/data/simulate_validation_here.json"
HERE_TARGET = 0.10  # predicted / measured within 10% at every p


def load(path: str) -> dict[str, Any]:
    """A saved run as ``{"date", "command", "machine", "rows"}``; a bare list of rows gets None for the rest."""
    with open(path) as f:
        data = json.load(f)
    if isinstance(data, list):
        data = {"rows": data}
    return {"date": None, "command": None, "machine": None, **data}


def shown(path: str) -> str:
    """``path`` relative to the repository where it lies inside it."""
    rel = os.path.relpath(os.path.abspath(path), ROOT)
    return path if rel.startswith("..") else rel


def provenance(data: dict[str, Any], path: str) -> str:
    """One line: where the rows are saved, when, by which command, on what."""
    made = f" on {data['date']}" if data.get("date") else ""
    by = f" by `{data['command']}`" if data.get("command") else ""
    on = f" ({data['machine']})" if data.get("machine") else ""
    return f"saved in {shown(path)}{made}{by}{on}"


# ----------------------------------------------------------------------------- 1. against SimGrid
def error(row: dict, key: str = "minidl_s") -> float:
    """Relative error of ``key`` ("minidl_s" or "formula_s") against SimGrid."""
    return row[key] / row["simgrid_s"] - 1


def simgrid_table(rows: list[dict]) -> list[str]:
    """The largest and mean |error| per p (all topologies), then per topology and p."""
    ps = sorted({r["p"] for r in rows})
    lines = [f"{'p':>5}{'topology':>10}{'cases':>7}{'max |err|':>11}{'mean |err|':>12}{'formula max':>13}"]
    groups = [(p, "all") for p in ps] + [(p, t) for t in dict.fromkeys(r["topology"] for r in rows) for p in ps]
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


def simgrid_verdict(rows: list[dict], target: float = 0.03) -> str:
    worst = max(abs(error(r)) for r in rows)
    ok = "within" if worst <= target else "NOT within"
    return f"{len(rows)} cases; largest |minidl / SimGrid - 1| {100 * worst:.2g}%: {ok} the {100 * target:g}% target"


def saved_simgrid(path: str = SIMGRID_FILE) -> list[str]:
    """The SimGrid table from a saved run, under its provenance; one line saying how to make it if absent."""
    if not os.path.exists(path):
        return [f"no saved SimGrid run at {shown(path)}: make it with `{SIMGRID_COMMAND}`"]
    data = load(path)
    return [provenance(data, path) + ":", *simgrid_table(data["rows"]), simgrid_verdict(data["rows"])]


# ----------------------------------------------------------------------------- 2. against real runs here
def _range(values: list[float], fmt: str) -> str:
    return f"[{format(min(values), fmt)}-{format(max(values), fmt)}]"


def here_ratio(row: dict) -> float:
    """predicted / measured: the ratio of the medians (the per-repeat ratios give its spread)."""
    return float(np.median(row["predicted"]) / np.median(row["measured"]))


def here_table(rows: list[dict], target: float = HERE_TARGET) -> list[str]:
    """Per p: measured and predicted words/s (medians [min-max] of the repeats), predicted / measured (the ratio of
    the medians, [min-max] of the per-repeat ratios), other runnable tasks; then whether every p is within target."""
    lines = [f"{'p':>3}{'measured words/s':>28}{'predicted words/s':>28}{'pred./meas.':>13}  {'[min-max]':<13}"
             f"{'other tasks':>12}"]  # fmt: skip
    for row in sorted(rows, key=lambda r: r["p"]):
        m, q = row["measured"], row["predicted"]
        ratios = [b / a for a, b in zip(m, q)]
        others = f"{np.median(row['other_tasks']):>12.1f}" if row.get("other_tasks") else f"{'-':>12}"
        lines.append(
            f"{row['p']:>3}{np.median(m):>12,.0f} {_range(m, ',.0f'):>15}{np.median(q):>12,.0f} {_range(q, ',.0f'):>15}"
            f"{here_ratio(row):>12.2f}x  {_range(ratios, '.2f'):<13}{others}"
        )
    lines.append(here_verdict(rows, target))
    return lines


def here_verdict(rows: list[dict], target: float = HERE_TARGET) -> str:
    """One line: whether predicted / measured is within ``target`` of 1 at every p, and which p are not."""
    off = [r["p"] for r in sorted(rows, key=lambda r: r["p"]) if abs(here_ratio(r) - 1) > target]
    if not off:
        return f"every p within {100 * target:g}%: predicted / measured in [{1 - target:g}, {1 + target:g}]"
    return (
        f"not every p within {100 * target:g}%: p = {', '.join(map(str, off))} outside [{1 - target:g}, {1 + target:g}]"
    )


def saved_here(path: str = HERE_FILE) -> list[str]:
    """The real-run table from a saved run, under its provenance; one line saying how to make it if absent."""
    if not os.path.exists(path):
        return [f"no saved real-run comparison at {shown(path)}: make it with `{HERE_COMMAND}`"]
    data = load(path)
    return [provenance(data, path) + ":", *here_table(data["rows"])]


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--simgrid", default=SIMGRID_FILE, help="saved SimGrid rows (default docs/data/...)")
    ap.add_argument("--here", default=HERE_FILE, help="saved real-run rows (default docs/data/...)")
    args = ap.parse_args(argv)
    print("1. against SimGrid (|err| = |minidl / SimGrid - 1|)")
    print("\n".join(saved_simgrid(args.simgrid)))
    print("\n2. against real runs here (words/s of the LSTM LM demo, --parallel data --allreduce ring)")
    print("\n".join(saved_here(args.here)))


if __name__ == "__main__":
    main()
