"""``python -m minidl.launch -n P [--min-ranks M] [--max-restarts K] -- COMMAND``: an elastic job.

MPI cannot survive a dead rank: when one exits, mpiexec ends the whole job (as it should: nothing hangs).
So the job is made elastic around mpiexec, as Horovod Elastic and torchrun do: when the job fails, the
launcher starts it again from its newest checkpoint with the ranks that can be had::

    python -m minidl.launch -n 4 --min-ranks 2 --max-restarts 3 -- \\
        python -m minidl.train lm --parallel data --save runs/lm.npz --save-every 50

- the command runs under ``mpiexec -n P`` (the one beside this Python, else on PATH), or under Slurm
  (inside an allocation: ``srun`` over the allocation's ``SLURM_NNODES`` nodes);
- a failed attempt counts its rank as lost: the next runs on one rank fewer, never fewer than ``--min-ranks``
  (with ``--min-ranks P`` every restart has all P: a preempted node replaced);
- the restart resumes from the newest scheduled checkpoint beside the command's ``--save`` (it gets
  ``--resume FILE``; ``minidl.train`` keeps the global batch at the new size, so the data order goes on);
- one line per restart says what happened; after ``--max-restarts`` restarts it gives up with the last error.
  A command that exits with status 2 (bad input) is not restarted: running it again cannot help. A rank killed
  by a signal is named: "rank 1 killed by signal 9 (SIGKILL)" (its pid, from MPICH's report, mapped to its rank;
  Open MPI's report names the rank);
- a damaged newest checkpoint (cut short, a disk error) is named and passed over for the one before it;
- SIGTERM or SIGINT to the launcher (a batch system's scancel, a ``timeout``) is passed on to mpiexec, which ends
  its ranks; the launcher waits for them (killing the job's process group after GRACE seconds) and exits with
  128 + the signal's number, without a restart.

A parameter server (``--parallel ps``, which keeps no checkpoints) is not restarted this way: it outlives a
lost worker within the job instead, run under ``mpiexec -disable-auto-cleanup`` (MPICH) without this launcher
(``minidl/distributed/parameter_server/survivors.py``). The launcher keeps mpiexec's default, which ends every
rank when one dies: what a restart from checkpoints needs.

Bad input is refused in one line before anything starts: ``--min-ranks`` above ``-n``, a ``--save``
directory that cannot be written, a checkpoint there (or given by ``--resume``) of another model.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import IO, Any

from minidl.distributed import checkpoint_schedule as checkpoints
from minidl.distributed.checkpoint_schedule import RUN_ID_VARIABLE

PROG = "python -m minidl.launch"
SCHEDULE_FIELDS = ("batch_size", "epochs", "lr", "lr_decay", "decay_after", "warmup_epochs", "max_grad_norm")
FORWARDED = (signal.SIGTERM, signal.SIGINT)  # passed on to mpiexec, which ends its ranks
GRACE = 10.0  # seconds mpiexec has to end its ranks after a signal passed on, before its group is killed
RANK_VARIABLES = (b"PMI_RANK", b"PMIX_RANK", b"OMPI_COMM_WORLD_RANK", b"SLURM_PROCID")
# MPICH's (hydra's) report of a dead rank: "PID 765 RUNNING AT host", "EXIT CODE: 9", "... Killed (signal 9)"
BAD_TERMINATION = re.compile(r"PID (\d+) RUNNING AT (\S+)")
EXIT_CODE = re.compile(r"EXIT CODE: (\d+)")
SIGNALLED = re.compile(r"EXIT STRING: .*\(signal (\d+)\)")
# Open MPI's (PRRTE's), wrapped anywhere at 76 columns: "prterun noticed that process rank 1 with PID 765 on node vm
# exited on signal 9 (Killed)."; for a non-zero exit "Process name: [prterun-vm-27228@1,1]  Exit code: 3" (rank 1)
OMPI_SIGNALLED = re.compile(
    r"process\s+rank\s+(\d+)\s+with\s+PID\s+\d+\s+on\s+node\s+\S+\s+exited\s+on\s+signal\s+(\d+)"
)
OMPI_EXITED = re.compile(r"Process\s+name:\s+\[\S*,(\d+)\]\s+Exit\s+code:\s+(\d+)")


class LaunchError(Exception):
    """Bad input to the launcher: one line, exit 2, nothing started."""


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    parser = argparse.ArgumentParser(
        prog=PROG,
        usage=f"{PROG} -n P [--min-ranks M] [--max-restarts K] -- COMMAND",
        description=__doc__.split("\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("-n", type=int, required=True, help="ranks to start with")
    parser.add_argument("--min-ranks", type=int, help="restart with no fewer than M ranks (default: -n)")
    parser.add_argument("--max-restarts", type=int, default=3, help="give up after K restarts (default 3)")
    cut = argv.index("--") if "--" in argv else len(argv)
    if {"-h", "--help"} & set(argv[:cut]):
        parser.parse_args(["--help"])  # prints the help and exits 0
    if "--" not in argv:
        raise LaunchError("give the command after --, e.g. -n 2 -- python -m minidl.train lm --parallel data")
    args = parser.parse_args(argv[:cut])
    command = argv[cut + 1 :]
    args.min_ranks = args.n if args.min_ranks is None else args.min_ranks
    if args.n < 1 or args.min_ranks < 1 or args.max_restarts < 0:
        raise LaunchError("-n and --min-ranks must be >= 1, --max-restarts >= 0")
    if args.min_ranks > args.n:
        raise LaunchError(f"--min-ranks {args.min_ranks} is above -n {args.n}")
    if not command:
        raise LaunchError("no command after --")
    return args, command


def flag_value(command: Sequence[str], name: str) -> str | None:
    """The value of ``name`` in ``command`` (``--save X`` or ``--save=X``; the last one given)."""
    value = None
    for i, word in enumerate(command):
        if word == name and i + 1 < len(command):
            value = command[i + 1]
        elif word.startswith(name + "="):
            value = word.split("=", 1)[1]
    return value


def with_resume(command: Sequence[str], path: str) -> list[str]:
    """``command`` with its ``--resume`` (if any) replaced by ``--resume path``."""
    out, skip = [], False
    for word in command:
        if skip:
            skip = False
        elif word == "--resume":
            skip = True
        elif not word.startswith("--resume="):
            out.append(word)
    return [*out, "--resume", path]


def launcher(n: int) -> list[str]:
    """``srun`` inside a Slurm allocation, else ``mpiexec -n n`` (beside this Python, else on PATH)."""
    if os.environ.get("SLURM_JOB_ID") and shutil.which("srun"):
        nodes = min(int(os.environ.get("SLURM_NNODES", "1")), n)
        return ["srun", f"--nodes={nodes}", f"--ntasks={n}", "--kill-on-bad-exit=1"]
    beside = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    mpiexec = beside if os.access(beside, os.X_OK) else shutil.which("mpiexec")
    if mpiexec is None:
        raise LaunchError(f"no mpiexec beside {sys.executable} nor on PATH")
    return [mpiexec, "-n", str(n)]


def check_save(command: Sequence[str]) -> str | None:
    """The command's ``--save``, its directory writable (else a LaunchError)."""
    save = flag_value(command, "--save")
    if save is None:
        return None
    directory = os.path.dirname(os.path.abspath(save))
    with contextlib.suppress(OSError):
        os.makedirs(directory, exist_ok=True)  # as the trainer makes it
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise LaunchError(f"--save {save}: the directory {directory} does not exist or is not writable")
    return save


def check_model(command: Sequence[str], checkpoint: str) -> None:
    """A checkpoint of another model is refused: the command's settings (``--print-config``) against the
    checkpoint's, every field but the schedule's (batch size, epochs, learning rate may change on resume)."""
    if not any("minidl.train" in word for word in command):
        return
    from minidl.serialization import load

    try:
        saved = load(checkpoint).get("state", {})
    except (ValueError, OSError) as e:
        raise LaunchError(f"cannot resume from {checkpoint}: {e}") from None
    done = subprocess.run([*command, "--print-config"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise LaunchError(f"the command fails before it starts: {done.stderr.strip().splitlines()[-1:]}")
    now = json.loads(done.stdout)
    if saved.get("preset", now["preset"]) != now["preset"]:
        raise LaunchError(f"{checkpoint} is of preset {saved['preset']}, the command trains preset {now['preset']}")
    for key, value in saved.get("config", {}).items():
        if key not in SCHEDULE_FIELDS and now["config"].get(key) != value:
            raise LaunchError(
                f"{checkpoint} is of another model: {key} = {value}, the command has {now['config'].get(key)}"
            )


class Interrupted(Exception):
    """The launcher got SIGTERM or SIGINT: it passed the signal on to the job, which has ended."""

    def __init__(self, signum: int, code: int):
        super().__init__(signum, code)
        self.signum, self.code = signum, code


def attempt(command: list[str], ranks: int = 0) -> tuple[int, str]:
    """Run ``command`` (its output passed through); returns its exit status and its most telling line.

    mpiexec runs in a session of its own; SIGTERM or SIGINT to the launcher is passed on to it (mpiexec ends
    its ranks) and, should it outlive GRACE seconds, its whole process group is killed: then ``Interrupted``.
    """
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    tail: collections.deque[str] = collections.deque(maxlen=40)
    pids: dict[int, int] = {}  # pid -> rank, of the ranks seen running
    threads = [
        threading.Thread(target=_pump, args=(stream, out, tail), daemon=True)
        for stream, out in ((proc.stdout, sys.stdout), (proc.stderr, sys.stderr))
    ]
    ended: list[list[int]] = []  # the ranks' pids that ended, a group per look
    threads.append(threading.Thread(target=_watch_ranks, args=(proc, ranks, pids, ended), daemon=True))
    for thread in threads:
        thread.start()
    with _signals_passed_to(proc) as got:
        code = _reap(proc, got)
    for thread in threads[:2]:
        thread.join()
    if got:
        raise Interrupted(got[0], code)
    first = ended[0][0] if ended and len(ended[0]) == 1 else None  # the one rank that ended first, if one did
    return code, last_error(tail, pids, code, first)


def _pump(stream: IO[str], out: IO[str], tail: collections.deque[str]) -> None:
    for line in stream:
        out.write(line)
        out.flush()
        tail.append(line.rstrip())


@contextlib.contextmanager
def _signals_passed_to(proc: subprocess.Popen) -> Iterator[list[int]]:
    """While inside: SIGTERM and SIGINT to this process are sent on to ``proc`` (and listed in the list yielded)."""
    got: list[int] = []

    def forward(signum: int, frame: Any) -> None:
        got.append(signum)
        if proc.poll() is None:
            proc.send_signal(signum)

    if threading.current_thread() is not threading.main_thread():  # handlers can be set only there
        yield got
        return
    before = {signum: signal.signal(signum, forward) for signum in FORWARDED}
    try:
        yield got
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def _reap(proc: subprocess.Popen, got: list[int]) -> int:
    """Wait for ``proc``; once a signal was passed on, give it GRACE seconds, then kill its process group."""
    deadline = None
    while True:
        try:
            return proc.wait(timeout=0.2)
        except subprocess.TimeoutExpired:
            if got and deadline is None:
                deadline = time.monotonic() + GRACE
            if deadline is not None and time.monotonic() > deadline:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)


def _watch_ranks(proc: subprocess.Popen, ranks: int, pids: dict[int, int], ended: list[list[int]]) -> None:
    """Fill ``pids`` (pid -> MPI rank) with the job's ranks while it runs, until all ``ranks`` are seen (or for a
    minute: ranks on other nodes, under srun, are not this machine's processes); and list in ``ended`` the pids
    that end, a group per look (mpiexec's report may name a rank it killed itself after the one that died)."""
    until, done = time.monotonic() + 60, set()
    while proc.poll() is None:
        if len(set(pids.values())) < ranks and time.monotonic() < until:
            pids.update(rank_pids(proc.pid))
        now = [pid for pid in pids if pid not in done and not _running(pid)]
        if now:
            ended.append(now)
            done.update(now)
        time.sleep(0.02)  # mpiexec ends the other ranks within milliseconds of the first death


def _running(pid: int) -> bool:
    """Whether process ``pid`` is alive (not ended, nor a zombie waiting for its parent)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] not in ("Z", "X")
    except (OSError, IndexError):
        return False


def rank_pids(root: int) -> dict[int, int]:
    """pid -> rank of the descendants of process ``root`` that carry an MPI rank in their environment (PMI_RANK
    under MPICH's mpiexec; Linux's /proc; {} elsewhere). mpiexec's report of a dead rank names only its pid."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc") if os.path.isdir("/proc") else []:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found, todo = {}, list(children.get(root, []))
    while todo:
        pid = todo.pop()
        todo += children.get(pid, [])
        try:
            with open(f"/proc/{pid}/environ", "rb") as f:
                env = dict(v.partition(b"=")[::2] for v in f.read().split(b"\0"))
        except OSError:
            continue
        rank = next((env[v] for v in RANK_VARIABLES if v in env), None)
        if rank is not None and rank.isdigit():
            found[pid] = int(rank)
    return found


def last_error(
    lines: Sequence[str], pids: dict[int, int] | None = None, code: int = 1, first: int | None = None
) -> str:
    """The most telling line of a failed attempt: a rank killed by a signal (from mpiexec's report of a bad
    termination, the rank found by its pid, or by the pid ``first`` seen to end, alone, before any other), else
    the exception or the dead rank's line, else the last line."""
    text = "\n".join(lines)
    dead, signalled = BAD_TERMINATION.search(text), SIGNALLED.search(text)
    who = None
    if dead:
        pid = first if first is not None and pids and first in pids else int(dead.group(1))
        who = f"rank {pids[pid]}" if pids and pid in pids else f"a rank (pid {pid} on {dead.group(2)})"
    if who and signalled:
        return f"{who} killed by signal {signalled.group(1)} ({signal_name(int(signalled.group(1)))})"
    ompi_signalled, ompi_exited = OMPI_SIGNALLED.search(text), OMPI_EXITED.search(text)
    if ompi_signalled:  # Open MPI's report names the rank itself
        rank, signum = ompi_signalled.groups()
        return f"rank {rank} killed by signal {signum} ({signal_name(int(signum))})"
    for line in reversed(lines):
        if any(key in line for key in ("Error", "error:", "--inject-failure", "Exception")):
            return line.strip()
    if who:
        exited = EXIT_CODE.search(text)
        return f"{who} exited with status {exited.group(1) if exited else '?'}"
    if ompi_exited:
        return f"rank {ompi_exited.group(1)} exited with status {ompi_exited.group(2)}"
    if code < 0:
        return f"mpiexec killed by signal {-code} ({signal_name(-code)})"
    return lines[-1].strip() if lines else f"(no output; exit status {code})"


def signal_name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def run(args: argparse.Namespace, command: list[str]) -> int:
    """Run the job, restarting it from its own newest checkpoint: every attempt gets one run id (MINIDL_RUN_ID if
    set, as a batch system's requeue may, else the given --resume's or a new one), written into its checkpoints,
    and a restart resumes only that run's."""
    save = check_save(command)
    given = flag_value(command, "--resume")
    before = os.environ.get(RUN_ID_VARIABLE)
    os.environ[RUN_ID_VARIABLE] = before or (checkpoints.run_of(given) if given else None) or uuid.uuid4().hex[:12]
    try:
        return run_job(args, command, save, given, os.environ[RUN_ID_VARIABLE])
    finally:
        if before is None:
            del os.environ[RUN_ID_VARIABLE]
        else:
            os.environ[RUN_ID_VARIABLE] = before


def run_job(args: argparse.Namespace, command: list[str], save: str | None, given: str | None, run: str) -> int:
    for path in (given, newest_intact(save, run) if save else None):
        if path and os.path.isfile(path):
            check_model(command, path)
    if save and os.path.exists(checkpoints.failure_marker(save)):
        os.remove(checkpoints.failure_marker(save))  # a new job: --inject-failure may fire once again
    ranks, restarts, current = args.n, 0, list(command)
    while True:
        try:
            code, error = attempt([*launcher(ranks), *current], ranks)
        except Interrupted as e:
            name = signal_name(e.signum)
            print(
                f"{PROG}: got {name}: passed it to the job, which ended (status {e.code}); not restarting", flush=True
            )
            return 128 + e.signum
        if code == 0:
            print(f"{PROG}: done after {restarts} restart{'s' * (restarts != 1)} ({ranks} ranks)", flush=True)
            return 0
        if code == 2:
            print(f"{PROG}: the command's input is wrong (status 2), not restarting: {error}", file=sys.stderr)
            return 2
        if restarts == args.max_restarts:
            print(f"{PROG}: giving up after {restarts} restarts; last error: {error}", file=sys.stderr)
            return code if code > 0 else 1
        restarts, ranks = restarts + 1, max(ranks - 1, args.min_ranks)
        latest = newest_intact(save, run) if save else None
        current = with_resume(command, latest) if latest else list(command)
        where = f"from {latest}" if latest else "from the start (no checkpoint yet)"
        print(f"{PROG}: restart {restarts}/{args.max_restarts} on {ranks} ranks {where}; failed: {error}", flush=True)


def newest_intact(save: str, run: str | None = None) -> str | None:
    """The newest scheduled checkpoint beside ``save`` that loads (None if none does), of run ``run`` if given
    (another run's, left in the same folder, is never resumed). A damaged one (a copy cut short, a disk error) is
    named and passed over for the one before it; stale half-written files are removed."""
    from minidl.serialization import load

    checkpoints.prune_temporaries(save)
    for _, path in reversed(checkpoints.scheduled(save)):
        if run is not None and checkpoints.run_of(path) != run:
            continue
        try:
            load(path)
        except (ValueError, OSError) as e:  # CheckpointError is a ValueError
            print(f"{PROG}: passing over the damaged checkpoint {path}: {e}", file=sys.stderr, flush=True)
            continue
        return path
    return None


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, command = parse(sys.argv[1:] if argv is None else argv)
        return run(args, command)
    except LaunchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
