"""What a training run writes, made safe before the first step: its folders, its lock, its run id, its log.

A run writes a checkpoint (``--save``, and ``--save-every``'s beside it), a log (``--log-json``) and a trace
(``--timeline``). Each can go wrong in a way that costs the run, or another run's work:

- a path whose folder is missing is made (``runs/lm.jsonl`` in a fresh clone); one that cannot be written (a
  read-only folder, a folder given as a file, ``/dev/full``) is one line before training, not a traceback
  after it (``writable``);
- two jobs given the same ``--save`` would replace or prune each other's checkpoints: the first holds a lock
  file beside it (``PATH.lock``: its pid and host) and the second is refused; a lock left by a process that has
  died on this host is taken over (``SaveLock``);
- every checkpoint carries the run's id (``state["run"]``), so that ``--keep`` prunes, and the launcher resumes,
  only the run's own checkpoints, never an older run's left in the same folder. A fresh run takes a new id (or
  ``MINIDL_RUN_ID``, which ``python -m minidl.launch`` sets for every restart of one job); a ``--resume`` goes
  on with the checkpoint's id;
- ``--log-json`` appends when the run goes on from a checkpoint (a restart or a resume by hand keeps the steps
  before it), and is never written over a file that is not such a log (``runs/lm.npz`` given by mistake).

``writable`` is called by ``check_args`` for every path; ``claim(args, root)`` does the rest on the rank that
writes (``root``), raising ``UsageError`` (one line, exit 2 on every rank through ``validate_or_exit``);
``release(args)`` gives the lock back at the end of the run.
"""

from __future__ import annotations

import errno
import json
import os
import socket
import uuid
from typing import Any

from collectives.paths import unwritable
from minidl.distributed import checkpoint_schedule
from minidl.distributed.checkpoint_schedule import RUN_ID_VARIABLE
from minidl.distributed.usage import UsageError

OUTPUT_FLAGS = ("--save", "--log-json", "--timeline")  # the paths a run writes


def writable(path: str, flag: str) -> None:
    """Make ``path``'s folders; raise ``UsageError`` naming ``flag`` if ``path`` cannot be written there."""
    problem = unwritable(path)
    if problem is not None:
        raise UsageError(f"{flag} {path}: {problem}")


def check_log(path: str, appends: bool) -> None:
    """``--log-json PATH`` holds nothing, or JSON lines of a run's log (each an object with a ``kind``): refuse to
    write over any other file (a checkpoint given by mistake); a log is appended to only by a run that goes on."""
    if not os.path.isfile(path) or os.path.getsize(path) == 0:
        return
    with open(path, "rb") as f:
        first = f.readline(1 << 20)
    try:
        record = json.loads(first)
        is_log = isinstance(record, dict) and "kind" in record
    except ValueError:  # UnicodeDecodeError too
        is_log = False
    if not is_log:
        raise UsageError(
            f"--log-json {path}: the file exists and is not a log of python -m minidl.train (its first line is not a "
            "JSON record); give another path, or remove it"
        )


class SaveLock:
    """``PATH.lock`` beside a run's ``--save PATH``: one line, ``pid host``, of the process that writes there."""

    def __init__(self, save: str):
        self.path = checkpoint_schedule.lock_path(save)
        self.save, self.held = save, False

    def acquire(self) -> None:
        """Create the lock, or raise ``UsageError`` naming its owner; a dead owner's lock (this host) is taken over."""
        me = f"{os.getpid()} {socket.gethostname()}\n"
        for _ in range(3):  # a stale lock removed, then created again; another job may race for it
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            except FileExistsError:
                owner = self.owner()
                if owner is None or self.alive(*owner):
                    pid, host = owner or ("?", "?")
                    raise UsageError(
                        f"--save {self.save}: another job (pid {pid} on {host}) is writing checkpoints there "
                        f"({self.path}); give another --save, or remove the lock if that job is gone"
                    ) from None
                try:
                    os.remove(self.path)  # its owner is dead: take it over
                except FileNotFoundError:
                    pass
                continue
            except OSError as e:
                raise UsageError(f"--save {self.save}: cannot create the lock {self.path} ({e.strerror})") from None
            with os.fdopen(fd, "w") as f:
                f.write(me)
            self.held = True
            return
        raise UsageError(f"--save {self.save}: the lock {self.path} is being taken by another job")

    def owner(self) -> tuple[int, str] | None:
        """(pid, host) of the lock's owner; None if it cannot be read (being written: treated as alive)."""
        try:
            with open(self.path) as f:
                pid, host = f.read().split()
            return int(pid), host
        except (OSError, ValueError):
            return None

    @staticmethod
    def alive(pid: int, host: str) -> bool:
        """Whether the owner may still run: a process of this host that exists and is not this one (a run before
        this one in the same process, a test's, has ended); on another host it cannot be known, so yes."""
        if host != socket.gethostname():
            return True
        if pid == os.getpid():
            return False
        try:
            os.kill(pid, 0)
        except OSError as e:
            return e.errno == errno.EPERM  # exists, another user's
        return True

    def release(self) -> None:
        if self.held:
            self.held = False
            try:
                os.remove(self.path)
            except FileNotFoundError:
                pass


class Claimed:
    """What ``claim`` took: the lock (or None) and the run's id (None on a rank that writes nothing)."""

    def __init__(self, lock: SaveLock | None, run: str | None):
        self.lock, self.run = lock, run


def claim(args: Any, root: bool = True) -> None:
    """On the rank that writes (``root``; after ``check_args`` made the folders with ``writable``): refuse a log
    over another file, take ``--save``'s lock and settle the run id (``args.outputs``); raise ``UsageError``."""
    args.outputs = Claimed(None, None)
    if not root:
        return
    resume, save = getattr(args, "resume", None), getattr(args, "save", None)
    if getattr(args, "log_json", None) is not None:
        check_log(args.log_json, appends=resume is not None)
    run = run_id(resume)
    lock = None
    if save is not None:
        lock = SaveLock(save)
        lock.acquire()
        others = [path for _, path in checkpoint_schedule.scheduled(save) if checkpoint_schedule.run_of(path) != run]
        if others:
            print(
                f"--save {save}: {len(others)} scheduled checkpoint{'s' * (len(others) != 1)} of another run beside it "
                f"(the newest {others[-1]}) left alone: --keep prunes only this run's",
                flush=True,
            )
    args.outputs = Claimed(lock, run)


def run_id(resume: str | None) -> str:
    """The run's id: the resumed checkpoint's (refused if ``MINIDL_RUN_ID`` names another run), else
    ``MINIDL_RUN_ID``, else a new one."""
    given = os.environ.get(RUN_ID_VARIABLE) or None
    if resume is not None:
        saved = checkpoint_schedule.run_of(resume)
        if saved is not None and given is not None and saved != given:
            raise UsageError(
                f"--resume {resume}: a checkpoint of run {saved}, and this job is run {given} ({RUN_ID_VARIABLE}); "
                "resume only a checkpoint of the same run"
            )
        if saved is not None:
            return saved
    return given or uuid.uuid4().hex[:12]


def release(args: Any) -> None:
    """Give back ``--save``'s lock (the end of the run)."""
    outputs = getattr(args, "outputs", None)
    if outputs is not None and outputs.lock is not None:
        outputs.lock.release()
