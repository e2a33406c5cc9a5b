"""What the training loop (``minidl.train.loop``) prints and logs: the header, a progress line every
``--log-every`` steps, a line per evaluation, the final score and the mode's report; the same records as JSON
lines with ``--log-json FILE``, after one record of kind "machine" (``minidl.tools.info.machine_facts``: the BLAS
kernel, the CPU, the MPI library, a measured sgemm rate), so that a log's speeds say what they ran on.

Throughput is words (or images) per second: this rank's rate times the ranks that train on different data
(``strategy.replicas``), with the per-rank rate and, given ``--baseline-wps`` (one rank alone), the
weak-scaling efficiency. Evaluation and checkpoints are not training time: the clock stops for them.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import IO, Any

import numpy as np


def scalars(scores: dict[str, Any], split: str) -> dict[str, float]:
    """The numbers of an evaluation that a JSON record keeps (not arrays, not flags), without the split's prefix."""
    return {k.removeprefix(f"{split}_"): v for k, v in scores.items() if isinstance(v, float)}


def format_duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    h, m = divmod(m, 60)
    return f"{h}:{m:02d}:{s:02d}" if h else f"{m}:{s:02d}"


class Throughput:
    """Items per second between two progress lines and over the run, of this rank and of all ``replicas``."""

    def __init__(self, unit: str, replicas: int, baseline: float | None):
        self.unit, self.replicas, self.baseline = unit, replicas, baseline
        self.items, self.seconds, self.total_items, self.total_seconds = 0, 0.0, 0, 0.0
        self.resume()

    def pause(self) -> None:
        self.seconds += time.perf_counter() - self._start

    def resume(self) -> None:
        self._start = time.perf_counter()

    def overall(self) -> float:
        """Items/s of all replicas over the run so far (paused time excluded); call after ``pause()``."""
        return self.replicas * (self.total_items + self.items) / max(self.total_seconds + self.seconds, 1e-9)

    def format(self, per_rank: float) -> str:
        """ "G units/s (R/rank, efficiency E%)": all replicas, this rank, and this rank / one rank alone."""
        text = f"{per_rank * self.replicas:,.0f} {self.unit}/s"
        if self.replicas > 1 or self.baseline:
            eff = f", efficiency {100 * per_rank / self.baseline:.0f}%" if self.baseline else ""
            text += f" ({per_rank:,.0f}/rank{eff})"
        return text

    def take(self) -> float:
        """This rank's items/s since the last call; starts the next interval."""
        self.pause()
        rate = self.items / max(self.seconds, 1e-9)
        self.total_items, self.total_seconds = self.total_items + self.items, self.total_seconds + self.seconds
        self.items, self.seconds = 0, 0.0
        self.resume()
        return rate


def open_log(args: Any) -> IO[str]:
    """``--log-json``'s file, its folder made: appended to by a run that goes on from a checkpoint (``--resume``, a
    launcher's restart), so the steps before it stay; a fresh run starts it anew (closed in ``Progress.finish``)."""
    os.makedirs(os.path.dirname(os.path.abspath(args.log_json)), exist_ok=True)
    return open(args.log_json, "a" if getattr(args, "resume", None) else "w")  # noqa: SIM115


class Progress:
    def __init__(self, task: Any, strategy: Any, args: Any, steps_per_epoch: int, total: int, start: int = 0):
        self.task, self.strategy, self.ctx = task, strategy, strategy.ctx
        self.spe, self.total = steps_per_epoch, total
        self.log_every = args.log_every or max(1, steps_per_epoch // task.lines_per_epoch)
        self.speed = Throughput(task.unit, strategy.replicas, args.baseline_wps)
        self.history: dict[str, list] = {"train": [], task.epoch_split: []}
        self.started, self.lr, self.sums = time.perf_counter(), 0.0, np.zeros(task.tally_width)
        self.first_step = start  # the step the ETA's pace counts from (a resumed run's first)
        self.bar = sys.stdout.isatty()  # a terminal: a bar before the ETA; a log: plain lines
        prints = self.ctx.rank == strategy.log_rank
        self.json = open_log(args) if args.log_json and prints else None
        if self.json is not None:  # first, what the numbers ran on: the BLAS kernel, CPU, MPI, a measured sgemm
            from minidl.tools.info import SGEMM_QUICK_N, machine_facts

            self.json.write(json.dumps({"kind": "machine", **machine_facts(SGEMM_QUICK_N)}) + "\n")

    def emit(self, record: dict[str, Any], text: str) -> None:
        """Print ``text`` and log ``record`` on the rank that reports (rank 0; the first worker of a parameter server),
        the record with its wall-clock ``time`` (Unix seconds) and the seconds ``elapsed`` since the run began."""
        if self.ctx.rank == self.strategy.log_rank:
            print(text, flush=True)
            if self.json is not None:
                stamp = {"time": round(time.time(), 3), "elapsed": round(time.perf_counter() - self.started, 3)}
                self.json.write(json.dumps(record | stamp) + "\n")
                self.json.flush()

    def step(self, pos: Any, batch: Any, loss: float | None) -> None:
        self.speed.items += self.task.items(batch)
        if loss is not None and self.strategy.reports:
            self.sums = self.sums + self.task.tally(loss, batch)
        if pos.step % self.log_every == 0 or pos.step == self.total:
            self.line(pos)

    def line(self, pos: Any) -> None:
        rate, timings = self.speed.take(), self.strategy.timings()
        record = {"kind": "train", "step": pos.step, "epoch": pos.epoch, "lr": self.lr}
        sums, self.sums = self.sums, np.zeros_like(self.sums)
        record |= self.task.train_record(self.strategy.total(sums))
        record[f"{self.task.unit}_per_s"] = rate * self.speed.replicas
        for phase in ("compute", "wait", "communication"):
            record[f"{phase[:4]}_s"] = timings[phase] if timings else None
        text = f"{self.task.progress_text(record, pos, self.spe)} | {self.speed.format(rate)}{self.strategy.suffix()}"
        text += f" | {self.eta(pos.step)}"
        if timings:
            step_s = sum(timings.values())
            parts = " ".join(f"{k[:4]} {100 * v / max(step_s, 1e-12):.0f}%" for k, v in timings.items())
            text += f" | {1e3 * step_s:.0f} ms/step: {parts}"
        self.history["train"].append((pos.step, *(record[k] for k in self.task.history_keys)))
        self.emit(record, text)

    def eta(self, step: int) -> str:
        """ "38% ETA 1:02" (steps done of all, the time left at the pace so far, evaluations included), after a
        bar of 20 cells on a terminal: ``[#######.............]``."""
        done, seconds = step - self.first_step, time.perf_counter() - self.started
        left = (self.total - step) * seconds / max(done, 1)
        fraction = step / max(self.total, 1)
        text = f"{100 * fraction:.0f}% ETA {format_duration(left)}"
        cells = int(20 * fraction)
        return f"[{'#' * cells}{'.' * (20 - cells)}] {text}" if self.bar else text

    def evaluation(self, pos: Any, split: str, result: dict[str, Any]) -> None:
        record = {"kind": "eval", "split": split, "step": pos.step, "epoch": pos.epoch, **scalars(result, split)}
        headline, text = self.task.eval_text(split, result)
        self.history[split].append((pos.epoch, headline))
        elapsed = format_duration(time.perf_counter() - self.started)
        self.emit(record, f"epoch {pos.epoch} done | {text} | {elapsed} elapsed")

    def header(self, title: str, lines: list[str]) -> None:
        self.ctx.log(title)
        for line in lines + self.strategy.describe():
            self.ctx.log(f"  {line}")

    def finish(self, result: dict[str, Any], record: dict[str, Any]) -> None:
        """The score line, then the mode's report (collective: every rank calls it)."""
        ranks = f" on {self.ctx.size} ranks" if self.ctx.size > 1 else ""
        per_rank = result[f"{self.task.unit}_per_s"] / self.speed.replicas
        score = self.task.score_line(result)
        duration = format_duration(result["seconds"])
        self.emit(record, f"{score} | {result['steps']} steps in {duration}{ranks}, {self.speed.format(per_rank)}")
        for line in self.strategy.report(result):
            self.ctx.log(line)
        self.close()

    def close(self) -> None:
        if self.json is not None:
            self.json.close()
            self.json = None
