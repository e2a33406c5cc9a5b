"""``python -m minidl.plot LOG.jsonl [--out PNG]``: a training run's curves, from its ``--log-json`` records.

Two panels side by side: the training loss (the language model: perplexity, on a log scale) against the
optimizer step, and the same against wall-clock time (each record's ``elapsed`` seconds), with the
evaluations (validation or test) as dots. Time is the axis that compares runs of different speeds: two
runs at the same step may be minutes apart. The figure goes beside the log (``LOG.png``) unless ``--out``
names another file; the first line of the log (kind "machine") titles it with what the run ran on.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from typing import Any


def read_log(path: str) -> list[dict[str, Any]]:
    """The JSON records (objects) of ``path``, one per line. Lines that are not one (a last line cut short by a full
    disk or a killed run, a resumed run's first record written after it, a JSON array) are left out with one
    warning that names them: what is complete is plotted. A ValueError where no line is a record."""
    records, bad = [], []
    with open(path, errors="replace") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError as e:
                bad.append((number, "cut short" if not line.endswith("\n") else f"not JSON: {e.msg}"))
                continue
            if isinstance(record, dict):
                records.append(record)
            else:
                bad.append((number, f"a JSON {type(record).__name__}, not a record"))
    if bad and not records:
        raise ValueError(f"line {bad[0][0]}: {bad[0][1]}: no line is a JSON record (is it a --log-json file?)")
    if bad:
        named = "; ".join(f"line {n}: {why}" for n, why in bad[:3]) + ("; ..." if len(bad) > 3 else "")
        warn(
            f"{path}: left out {len(bad)} line(s) that are not complete JSON records ({named}); plotting the other {len(records)}"
        )
    return records


def warn(message: str) -> None:
    print(f"python -m minidl.plot: warning: {message}", file=sys.stderr)


def curves(records: list[dict[str, Any]]) -> tuple[str, dict[str, list[tuple[float, float, float]]]]:
    """The metric drawn ("ppl" where the records have it, else "loss") and, per split ("train", "valid",
    "test"), its points as (step, elapsed seconds, value)."""
    train = [r for r in records if r.get("kind") == "train"]
    if not train:
        raise ValueError("no training records (kind 'train'): was the log written by --log-json?")
    metric = "ppl" if "ppl" in train[0] else "loss"
    points: dict[str, list[tuple[float, float, float]]] = {}
    for r in records:
        split = "train" if r.get("kind") == "train" else r.get("split") if r.get("kind") == "eval" else None
        if split and metric in r and "elapsed" in r:
            points.setdefault(split, []).append((r["step"], r["elapsed"], r[metric]))
    if not points.get("train"):
        raise ValueError("the records have no 'elapsed' field: written before minidl logged wall time")
    return metric, points


def draw(records: list[dict[str, Any]], out: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metric, points = curves(records)
    machine = next((r for r in records if r.get("kind") == "machine"), {})
    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for column, (ax, xlabel) in enumerate(zip(axes, ("optimizer step", "wall-clock time (s)"))):
        for split, rows in points.items():
            xs, ys = [row[column] for row in rows], [row[2] for row in rows]
            ax.plot(xs, ys, "-" if split == "train" else "o", label=split, alpha=0.8 if split == "train" else 1)
        ax.set(xlabel=xlabel, yscale="log" if metric == "ppl" else "linear")
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("perplexity" if metric == "ppl" else "loss")
    axes[0].legend()
    cpu = machine.get("cpu", {})
    ran_on = f"{cpu.get('model', '?')}, {cpu.get('cores', '?')} cores" if cpu else ""
    fig.suptitle(f"{os.path.basename(out)}" + (f" ({ran_on})" if ran_on else ""), fontsize=9)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minidl.plot", description=__doc__.splitlines()[0])
    parser.add_argument("log", help="a --log-json file of python -m minidl.train")
    parser.add_argument("--out", metavar="PNG", help="the figure (default: beside the log, LOG.png)")
    args = parser.parse_args(argv)
    out = args.out or os.path.splitext(args.log)[0] + ".png"
    try:
        draw(read_log(args.log), out)
    except (OSError, ValueError) as e:
        print(f"python -m minidl.plot: error: {args.log}: {e}", file=sys.stderr)
        return 2
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
