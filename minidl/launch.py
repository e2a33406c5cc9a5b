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
  A command that exits with status 2 (bad input) is not restarted: running it again cannot help.

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
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Sequence

from minidl.distributed import checkpoint_schedule as checkpoints

PROG = "python -m minidl.launch"
SCHEDULE_FIELDS = ("batch_size", "epochs", "lr", "lr_decay", "decay_after", "warmup_epochs", "max_grad_norm")


class LaunchError(Exception):
    """Bad input to the launcher: one line, exit 2, nothing started."""


def parse(argv: Sequence[str]) -> tuple[argparse.Namespace, list[str]]:
    argv = list(argv)
    if "--" not in argv:
        raise LaunchError("give the command after --, e.g. -n 2 -- python -m minidl.train lm --parallel data")
    cut = argv.index("--")
    parser = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, required=True, help="ranks to start with")
    parser.add_argument("--min-ranks", type=int, help="restart with no fewer than M ranks (default: -n)")
    parser.add_argument("--max-restarts", type=int, default=3, help="give up after K restarts (default 3)")
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
    if not os.path.isdir(directory) or not os.access(directory, os.W_OK | os.X_OK):
        raise LaunchError(f"--save {save}: the directory {directory} does not exist or is not writable")
    return save


def check_model(command: Sequence[str], checkpoint: str) -> None:
    """A checkpoint of another model is refused: the command's settings (``--print-config``) against the
    checkpoint's, every field but the schedule's (batch size, epochs, learning rate may change on resume)."""
    if not any("minidl.train" in word for word in command):
        return
    from minidl.serialization import load

    saved = load(checkpoint).get("state", {})
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


def attempt(command: list[str]) -> tuple[int, str]:
    """Run ``command`` (its output passed through); returns its exit status and the last lines of its stderr."""
    proc = subprocess.Popen(command, stderr=subprocess.PIPE, text=True)
    tail: collections.deque[str] = collections.deque(maxlen=40)

    def pump() -> None:
        for line in proc.stderr:  # type: ignore[union-attr]
            sys.stderr.write(line)
            tail.append(line.rstrip())

    reader = threading.Thread(target=pump, daemon=True)
    reader.start()
    code = proc.wait()
    reader.join()
    return code, last_error(tail)


def last_error(lines: Sequence[str]) -> str:
    """The most telling line of a failed attempt's stderr (the exception, the dead rank), else its last line."""
    for line in reversed(lines):
        if any(key in line for key in ("Error", "error:", "--inject-failure", "Exception")):
            return line.strip()
    return lines[-1].strip() if lines else "(no output)"


def run(args: argparse.Namespace, command: list[str]) -> int:
    save = check_save(command)
    given = flag_value(command, "--resume")
    for path in (given, checkpoints.latest(save) if save else None):
        if path and os.path.isfile(path):
            check_model(command, path)
    if save and os.path.exists(checkpoints.failure_marker(save)):
        os.remove(checkpoints.failure_marker(save))  # a new job: --inject-failure may fire once again
    ranks, restarts, current = args.n, 0, list(command)
    while True:
        code, error = attempt([*launcher(ranks), *current])
        if code == 0:
            print(f"{PROG}: done after {restarts} restart{'s' * (restarts != 1)} ({ranks} ranks)", flush=True)
            return 0
        if code == 2:
            print(f"{PROG}: the command's input is wrong (status 2), not restarting: {error}", file=sys.stderr)
            return 2
        if restarts == args.max_restarts:
            print(f"{PROG}: giving up after {restarts} restarts; last error: {error}", file=sys.stderr)
            return code or 1
        restarts, ranks = restarts + 1, max(ranks - 1, args.min_ranks)
        latest = checkpoints.latest(save) if save else None
        current = with_resume(command, latest) if latest else list(command)
        where = f"from {latest}" if latest else "from the start (no checkpoint yet)"
        print(f"{PROG}: restart {restarts}/{args.max_restarts} on {ranks} ranks {where}; failed: {error}", flush=True)


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args, command = parse(sys.argv[1:] if argv is None else argv)
        return run(args, command)
    except LaunchError as e:
        print(f"{PROG}: error: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
