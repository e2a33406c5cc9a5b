"""A grading run: every submission of a class judged by the kit, each in its own process, in one table.

    python -m collectives.check --grade DIR --collective allreduce [--function NAME] [--file NAME]
        [--timeout S] [--case-timeout S] [--memory MB] [--reports FOLDER] [--json FILE] [--csv FILE]
        [any option of the check itself: --examples, --seed, --max-ranks, --signature, --dtypes, ...]

A submission is ``DIR/NAME.py``, or a folder ``DIR/NAME/`` holding the file ``--file`` names (default: the
folder's only .py file). The function checked is ``--function`` (default: the collective's name, as the
package's own pages name theirs). Each submission is ``python -m collectives.check FILE:FUNCTION`` with the
same options, in a child process of its own (``run_isolated``):

- a wall-time limit (``--timeout``, default 300 s for the whole check) and a memory limit (``--memory``,
  default 4096 MB of address space: ``resource.setrlimit`` in the child, with no core files and at most
  256 MB written to any file); each case of the check has its own ``--case-timeout`` (default 20 s, the
  kit's, at most a quarter of the wall limit), after which the kit reports 'completes' failed;
- its output (stdout and stderr together) kept up to ``--cap`` bytes (default 256 KiB); past ten times that
  the child is ended and graded as a flood;
- in its own session, so that the whole process group is ended at the limit.

Whatever the submission does (hangs, sleeps, crashes, calls ``os._exit``, floods its output, fails to
import) becomes its verdict, and the run goes on to the next:

    passed      the check printed its pass line and exited 0
    failed      a shrunk counterexample: the first property that broke and the smallest case
    not loaded  the check's usage error (a syntax error, an exception at import, no such function, a
                signature that cannot be called): its one line
    timed out   no verdict within --timeout seconds
    flooded     more than ten times --cap bytes of output
    crashed     ended by a signal (a segmentation fault, the memory limit), an unexpected exit status, or
                a traceback from the check itself
    no verdict  exit status 0 or 1 without the check's verdict: the code ended the process itself
                (sys.exit, os._exit) before the check could say anything

The isolation guards against accidents, not against code written to forge a verdict (code run in a
process can print anything): that needs an operating-system sandbox.

A progress line per submission with an ETA, then a table (submission, verdict, first property failed,
smallest case, seconds). Each submission's full output is saved in ``--reports`` (default: a folder
``DIR-reports`` beside DIR) as NAME.txt, with the failure's space-time diagram as NAME.png. ``--json``
and ``--csv`` write the same rows for a gradebook: submission, verdict, passed, property, case, seconds,
report, cpu_seconds. Exit status 0 when every submission was graded (whatever the verdicts), 2 on a usage error,
130 after Ctrl-C (which ends the submission's process too; the table has the submissions graded before it).
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import os
import re
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import collectives

MB = 2**20
CAP = 256 * 1024  # bytes of a submission's output kept: a failure's report is 5-20 KB
FLOOD_FACTOR = 10  # output past this many times the cap ends the child


@dataclass
class Finished:
    """What a child process did: its exit status (None: ended at the time limit or for a flood), output, time."""

    returncode: int | None
    output: str
    seconds: float
    timed_out: bool = False
    flooded: bool = False
    dropped: int = 0  # bytes of output past the cap, not kept
    cpu_seconds: float = 0.0  # the child's user and system time (fairer than wall time on a shared machine)


def _limits(memory_mb: int, file_mb: int) -> Callable[[], None]:
    def apply() -> None:  # runs in the child between fork and exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb * MB, memory_mb * MB))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        resource.setrlimit(resource.RLIMIT_FSIZE, (file_mb * MB, file_mb * MB))

    return apply


def run_isolated(
    cmd: Sequence[str],
    *,
    timeout: float,
    memory_mb: int = 4096,
    cap: int = CAP,
    cwd: str | Path | None = None,
    env: dict[str, str] | None = None,
    file_mb: int = 256,
) -> Finished:
    """Run ``cmd`` in a process group of its own under a wall-time and a memory limit; keep ``cap`` bytes of
    its output (stdout and stderr together), end it past ``FLOOD_FACTOR * cap``; never raises for what the
    child does."""
    start, cpu = time.perf_counter(), _children_cpu()
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd=cwd, env=env,
        preexec_fn=_limits(memory_mb, file_mb), start_new_session=True,
    )  # fmt: skip
    kept, total, flooded = bytearray(), [0], threading.Event()

    def drain() -> None:
        assert proc.stdout is not None
        while chunk := proc.stdout.read1(65536):  # type: ignore[attr-defined]
            total[0] += len(chunk)
            kept.extend(chunk[: max(cap - len(kept), 0)])
            if total[0] > FLOOD_FACTOR * cap and not flooded.is_set():
                flooded.set()
                _end(proc)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = not flooded.is_set()
        _end(proc)
        proc.wait()
    except BaseException:  # Ctrl-C reaches only this process (the child has its own session): end the child too
        _end(proc)
        proc.wait()
        raise
    reader.join(timeout=5)
    ended = timed_out or flooded.is_set()
    return Finished(
        None if ended else proc.returncode, kept.decode(errors="replace"), time.perf_counter() - start,
        timed_out, flooded.is_set(), max(total[0] - len(kept), 0), _children_cpu() - cpu,
    )  # fmt: skip


def _children_cpu() -> float:
    """CPU seconds of this process's children that have ended (one child at a time: the last one's)."""
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _end(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@dataclass
class Row:
    """One submission's line of the table and of the gradebook."""

    submission: str
    verdict: str
    passed: bool
    property: str
    case: str
    seconds: float
    report: str
    cpu_seconds: float = 0.0


def judge(finished: Finished, passed: Callable[[str], bool], failure: Callable[[str], tuple[str, str] | None],
          usage: Callable[[str], str | None], limits: str) -> tuple[str, str, str]:  # fmt: skip
    """(verdict, property, case) of a child's run: ``passed(output)``: the check printed its pass line;
    ``failure(output)`` the property and smallest case of a shrunk report; ``usage(output)`` its one line."""
    out = finished.output
    if finished.flooded:
        return "flooded", f"ended after {len(out.encode()) + finished.dropped} bytes of output", ""
    if finished.timed_out:
        return "timed out", f"no verdict within {limits}", ""
    rc = finished.returncode
    if rc is not None and rc < 0:
        name = signal.Signals(-rc).name if -rc in signal.Signals._value2member_map_ else str(-rc)
        return "crashed", f"ended by {name}", ""
    if rc == 0 and passed(out):
        return "passed", "", ""
    found = failure(out) if rc == 1 else None
    if found is not None:
        return "failed", found[0], found[1]
    line = usage(out) if rc == 2 else None
    if line is not None:
        return "not loaded", line, ""
    if "Traceback (most recent call last)" in out:  # the check itself raised
        return "crashed", f"the check raised {_last_line(out)}", ""
    if rc in (0, 1):
        return "no verdict", f"exit status {rc} before the verdict (sys.exit or os._exit in the code?)", ""
    return "crashed", f"exit status {rc}: {_last_line(out)}", ""


def _last_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[-1].strip()[:200] if lines else "(no output)"


def submissions(folder: Path, file: str | None, skip: Sequence[Path] = ()) -> list[tuple[str, Path | str]]:
    """(name, the file to check) for every submission in ``folder``, by name; a folder without the file
    gives (name, why) instead."""
    found: list[tuple[str, Path | str]] = []
    for entry in sorted(folder.iterdir()):
        if entry.name.startswith((".", "_")) or any(entry.resolve() == s.resolve() for s in skip):
            continue
        if entry.is_file() and entry.suffix == ".py":
            found.append((entry.stem, entry))
        elif entry.is_dir():
            if file is not None:
                target = entry / file
                found.append((entry.name, target if target.is_file() else f"no {file} in {entry.name}/"))
            else:
                files = sorted(entry.glob("*.py"))
                why = f"{len(files)} .py files in {entry.name}/: say which with --file"
                found.append((entry.name, files[0] if len(files) == 1 else why))
    return found


def grade_folder(
    folder: Path,
    command: Callable[[Path, Path], list[str]],
    verdict: Callable[[Finished], tuple[str, str, str]],
    reports: Path,
    *,
    timeout: float,
    memory_mb: int,
    cap: int,
    file: str | None = None,
    out: Callable[[str], None] = print,
) -> tuple[list[Row], bool]:
    """Run ``command(path, report_stem)`` for every submission of ``folder``, each under ``run_isolated``;
    save each output in ``reports``; print a progress line with an ETA per submission. Returns the rows
    and whether every submission was graded (False: Ctrl-C ended the run, the rows are those before it)."""
    todo = submissions(folder, file, skip=[reports])
    reports.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([_root(), os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep))
    rows: list[Row] = []
    start = time.perf_counter()
    for k, (name, path) in enumerate(todo, start=1):
        try:
            rows.append(_grade_one(name, path, reports, command, verdict, timeout, memory_mb, cap, env))
        except KeyboardInterrupt:
            out(f"interrupted at {name}: the table of the {k - 1} graded so far")
            return rows, False
        row = rows[-1]
        elapsed = time.perf_counter() - start
        eta = elapsed / k * (len(todo) - k)
        what = f"{row.verdict}" + (f" ({_short(row.property)})" if row.property else "")
        out(f"[{k}/{len(todo)}] {name}: {what}, {row.seconds:.1f} s | {100 * k // len(todo)}% ETA {_clock(eta)}")
    return rows, True


def _grade_one(name: str, path: Path | str, reports: Path, command: Callable[[Path, Path], list[str]],
               verdict: Callable[[Finished], tuple[str, str, str]], timeout: float, memory_mb: int, cap: int,
               env: dict[str, str]) -> Row:  # fmt: skip
    """One submission's row: its check run under the limits, its output saved beside the others."""
    if isinstance(path, str):
        return Row(name, "not loaded", False, path, "", 0.0, "")
    stem = reports / name
    cmd = command(path.resolve(), stem.resolve())
    done = run_isolated(cmd, timeout=timeout, memory_mb=memory_mb, cap=cap, cwd=path.parent, env=env)
    verdict_, prop, case = verdict(done)
    prop = prop.replace(f"{path.parent.resolve()}{os.sep}", "")  # the student's file by its own name
    cut = f"\n[{done.dropped} more bytes of output not kept]\n" if done.dropped else ""
    report = stem.with_suffix(".txt")
    report.write_text(f"$ {' '.join(cmd)}\n{done.output}{cut}")
    seconds, cpu = round(done.seconds, 2), round(done.cpu_seconds, 2)
    return Row(name, verdict_, verdict_ == "passed", prop, case, seconds, str(report), cpu)


def _root() -> str:
    """The folder that holds the collectives package, for the children's imports."""
    return str(Path(collectives.__file__).resolve().parent.parent)


def _clock(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m // 60}:{m % 60:02d}:{s:02d}" if m >= 60 else f"{m}:{s:02d}"


def table(rows: Sequence[Row]) -> str:
    """The final table: submission, verdict, first property failed, smallest case, seconds."""
    head = ("submission", "verdict", "property", "smallest case", "seconds")
    cells = [(r.submission, r.verdict, _short(r.property), r.case, f"{r.seconds:.1f}") for r in rows]
    widths = [max(len(c[i]) for c in [head, *cells]) for i in range(4)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + f"  {row[4]:>7}" for row in [head, *cells]]
    passed = sum(r.passed for r in rows)
    return "\n".join(lines + [f"{passed} of {len(rows)} passed"])


def _short(text: str, width: int = 48) -> str:
    """A table cell: the first line, cut to ``width`` characters with an ellipsis (the JSON keeps it whole)."""
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= width else line[: width - 3] + "..."


def save(rows: Sequence[Row], json_path: str | None, csv_path: str | None) -> None:
    """The rows as a JSON list of objects and as CSV with a header line."""
    if json_path:
        Path(json_path).write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    if csv_path:
        with open(csv_path, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(Row.__dataclass_fields__))
            writer.writeheader()
            writer.writerows(asdict(r) for r in rows)


def grading_options(ap: argparse.ArgumentParser, what: str) -> None:
    """The options every grading run shares (the kit's and the exercises')."""
    ap.add_argument("--file", default=None, help="in a submission that is a folder, the file to check")
    ap.add_argument("--timeout", type=float, default=300.0, help=f"seconds {what} may run in all (default 300)")
    ap.add_argument("--memory", type=int, default=4096, help="MB of address space a submission may use (default 4096)")
    ap.add_argument("--cap", type=int, default=CAP, help="bytes of a submission's output kept (default 256 KiB)")
    ap.add_argument("--reports", default=None, help="where each full report goes (default: DIR-reports beside DIR)")
    ap.add_argument("--json", default=None, help="write the rows as JSON here")
    ap.add_argument("--csv", default=None, help="write the rows as CSV here")


def checked_grading(args: argparse.Namespace, ap: argparse.ArgumentParser) -> tuple[Path, Path]:
    """(the class's folder, the reports' folder), or argparse's usage error for a value that cannot run."""
    folder = Path(args.grade)
    if not folder.is_dir():
        ap.error(f"--grade {args.grade}: no such folder")
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        ap.error(f"--timeout {args.timeout:g}: seconds a submission may run, a positive number")
    if args.memory < 256 or args.cap < 1024:
        ap.error("--memory is at least 256 (MB) and --cap at least 1024 (bytes)")
    base = folder if folder.name else folder.resolve()  # "." has no name
    reports = Path(args.reports) if args.reports else base.parent / f"{base.name}-reports"
    if reports.exists() and not reports.is_dir():
        ap.error(f"--reports {reports}: a file is in the way")
    return folder, reports


def finish(graded: tuple[list[Row], bool], args: argparse.Namespace, reports: Path) -> int:
    """The table, the reports' folder, the JSON and CSV; 0, or 130 after a Ctrl-C (the rows graded before it)."""
    rows, complete = graded
    print(table(rows))
    print(f"full reports in {reports}/")
    save(rows, args.json, args.csv)
    return 0 if complete else 130


# -- the kit's grading run: python -m collectives.check --grade DIR ---------------------------------------
PASS_LINE = re.compile(r"^\S+:\w+: .*every property held on \d+ ", re.M)  # FILE:FUNCTION: allreduce: every ...
BROKE = re.compile(r" breaks '([\w-]+)'")
SMALLEST = re.compile(r"^smallest failing case: (?:\w+: )?(.+)$", re.M)


def kit_passed(output: str) -> bool:
    """The check printed its pass line."""
    return bool(PASS_LINE.search(output))


def kit_failure(output: str) -> tuple[str, str] | None:
    """(the first property that broke, the smallest failing case) from the check's report."""
    broke, smallest = BROKE.search(output), SMALLEST.search(output)
    return (broke.group(1), smallest.group(1) if smallest else "") if broke else None


def kit_usage(output: str) -> str | None:
    """The check's one usage line."""
    lines = [line for line in output.splitlines() if line.startswith(("collectives.check: ", "python -m"))]
    return lines[-1].split(": ", 1)[1] if lines else None


def main(argv: Sequence[str], parse: Callable[[Sequence[str]], object]) -> int:
    """``python -m collectives.check --grade DIR ...``: options not named here go to every check; ``parse``
    is the check's own parser (collectives/check.py passes it), which refuses a bad one before any submission runs."""
    from collectives.kit.spec import COLLECTIVES

    ap = argparse.ArgumentParser(
        prog="python -m collectives.check --grade", description=__doc__.split("\n\n")[0],
        epilog="Any other option (--signature, --dtypes, --ops, --min-n, --examples, --seed, ...) goes to every "
        "submission's check: python -m collectives.check --help lists them.",
    )  # fmt: skip
    ap.add_argument("--grade", required=True, metavar="DIR", help="the folder of submissions")
    ap.add_argument("--collective", default="allreduce", choices=list(COLLECTIVES), help="default: allreduce")
    ap.add_argument("--function", default=None, help="the function each file defines (default: the collective's name)")
    ap.add_argument("--case-timeout", type=float, default=20.0, help="seconds one case may run (default 20)")
    grading_options(ap, "one submission's check")
    if "-h" in argv or "--help" in argv:
        ap.print_help()
        return 0
    args, passed_on = ap.parse_known_args(argv)
    folder, reports = checked_grading(args, ap)
    if "--mpi" in passed_on:
        ap.error("--mpi: a grading run checks each submission on in-process ranks; run mpiexec per file for MPI")
    if not (math.isfinite(args.case_timeout) and args.case_timeout > 0):
        ap.error(f"--case-timeout {args.case_timeout:g}: a positive number of seconds")
    case_timeout = min(args.case_timeout, args.timeout / 4)
    function = args.function or args.collective
    options = ["--collective", args.collective, *passed_on, "--timeout", f"{case_timeout:g}"]
    parse(["submission.py:" + function, *options])  # the check's own usage errors, before any submission runs

    def command(path: Path, stem: Path) -> list[str]:
        target = [sys.executable, "-m", "collectives.check", f"{path}:{function}", *options]
        return target + ["--diagram", str(stem.with_suffix(".png"))]

    def verdict(done: Finished) -> tuple[str, str, str]:
        return judge(done, kit_passed, kit_failure, kit_usage, f"{args.timeout:g} s")

    print(f"grading {folder}/: {args.collective} as {function}(...), {args.timeout:g} s and {args.memory} MB each")
    graded = grade_folder(folder, command, verdict, reports, timeout=args.timeout, memory_mb=args.memory,
                          cap=args.cap, file=args.file)  # fmt: skip
    return finish(graded, args, reports)
