"""Ctrl-C during training: every rank stops after the same step, saves it, says how to resume, exits 130.

A SIGINT reaches the ranks of an ``mpiexec`` job at slightly different moments: one rank may be inside
step 381's allreduce while another has not begun it. Raising where the signal lands would leave the
ranks at different steps (and print a traceback per rank). So the first SIGINT only sets a flag, and at
every step boundary the ranks add up their flags (one 8-byte allreduce, ``Context.sum``): the sum is the
same on every rank, so all of them stop after the same step, write its checkpoint together and exit
with 130 (128 + SIGINT, as a shell's Ctrl-C does)::

    interrupted at epoch 4 step 381; saved runs/lm.step00000381.npz; resume with:
    mpiexec -n 2 python -m minidl.train lm --parallel data --resume runs/lm.step00000381.npz

A second Ctrl-C stops at once, saving nothing. The modes that write no checkpoint to resume from (model,
tensor, pipeline) stop at the agreed step and say so. A parameter server (``--parallel ps``) keeps no checkpoint
and its servers run no steps to agree at: its ranks stop at the first Ctrl-C.
"""

from __future__ import annotations

import os
import shlex
import signal
import threading
from types import FrameType
from typing import Any

from minidl import startup
from minidl.distributed import checkpoint_schedule
from minidl.train.checks import MODE_FLAGS

EXIT_INTERRUPTED = 128 + signal.SIGINT  # 130


class Interrupted(SystemExit):
    """The ranks agreed to stop after the same step (exit status 130): the job ends as a finished one does."""

    ends_together = True  # dist.run: every rank raises it after the same step, so no rank is left waiting

    def __init__(self) -> None:
        super().__init__(EXIT_INTERRUPTED)


class Watch:
    """Counts SIGINTs while training: the first asks for a stop at the next step boundary, the second stops now."""

    def __init__(self, immediate: bool = False):
        self.count, self.immediate, self.previous = 0, immediate, None
        if threading.current_thread() is threading.main_thread():  # handlers can be set only there
            self.previous = signal.signal(signal.SIGINT, self.handler)

    def handler(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.count > 1 or self.immediate:
            why = "a parameter server keeps no checkpoint" if self.immediate else "second Ctrl-C"
            # no unwinding (another rank may be inside a collective); rank 0's line is out before any rank leaves
            startup.end_interrupted(f"interrupted: {why}; stopped at once, nothing saved")

    def agreed(self, ctx: Any) -> bool:
        """True on every rank when any rank got a Ctrl-C (collective over ``ctx``: call it at every step). In
        ``immediate`` mode (a parameter server, whose servers run no steps) there is nothing to agree on."""
        if self.immediate or ctx.size == 1:
            return self.count > 0
        return bool(ctx.sum([float(self.count > 0)])[0] > 0)

    def close(self) -> None:
        if self.previous is not None:
            signal.signal(signal.SIGINT, self.previous)
            self.previous = None


def checkpoint_path(args: Any, task_name: str, step: int) -> str:
    """Where the interrupted step goes: beside ``--save`` (as ``--save-every`` names it), else under runs/."""
    return checkpoint_schedule.scheduled_path(args.save or os.path.join("runs", f"{task_name}.npz"), step)


def resume_command(argv: list[str], path: str, ranks: int) -> str:
    """The command that continues the run: this one with ``--resume path`` (under ``mpiexec -n ranks``)."""
    from minidl.tools.launch import with_resume

    command = ["python", "-m", "minidl.train", *with_resume(argv, path)]
    return shlex.join((["mpiexec", "-n", str(ranks)] if ranks > 1 else []) + command)


def stop(task: Any, strategy: Any, args: Any, preset: str, pos: Any, log: Any) -> None:
    """Save the agreed step on every rank, print the one line (and a JSON record), raise ``Interrupted``."""
    text = f"interrupted at epoch {pos.epoch} step {pos.step}"
    record = {"kind": "interrupted", "step": pos.step, "epoch": pos.epoch, "checkpoint": None}
    if args.parallel in MODE_FLAGS["--resume"][1].split():
        record["checkpoint"] = save(task, strategy, args, preset, pos)
        command = resume_command([task.name, *getattr(args, "argv", [])], record["checkpoint"], strategy.ctx.size)
        text += f"; saved {record['checkpoint']}; resume with: {command}"
    else:
        text += f"; nothing saved (--parallel {args.parallel} writes no checkpoint a run resumes from)"
    log.emit(record, text)
    log.close()
    raise Interrupted


def save(task: Any, strategy: Any, args: Any, preset: str, pos: Any) -> str:
    """Write step ``pos`` (every rank calls it); returns the path."""
    path = checkpoint_path(args, task.name, pos.step)
    if strategy.ctx.rank == 0:
        os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    if strategy.ctx.size > 1:
        strategy.ctx.comm.Barrier()  # the folder exists before any rank writes
    strategy.checkpoint(task, pos, preset, final=False, path=path)
    return path
