"""python -m minidl.exercises list | start NAME | check NAME [--solution | --file PATH] [--submit [--seed S]]
    | grade DIR NAME [--seed S] [--timeout S] [--json FILE] [--csv FILE]

Exit status of ``check``: 0 pass, 1 fail, 2 usage error (no such exercise or file). ``check`` runs the
student's code in a child process (``collectives.kit.grade.run_isolated``) under a time limit
(``--time-limit``, default 180 s; the slowest exercise's --submit takes 7 s on a quiet machine, 39 s with
the load average at 14 on 2 cores) and a memory limit: a loop that never ends, a sleep, ``sys.exit`` or
``os._exit`` in the student's code is a FAIL with its reason, never a pass; Ctrl-C ends it, exit 130.
``grade`` runs ``check --submit`` (hidden cases included) on every copy of one exercise in DIR, each in
its own process, with one seed for the whole class, and prints collectives.check --grade's table (see
collectives/kit/grade.py).
"""

from __future__ import annotations

import argparse
import math
import re
import secrets
import shutil
import sys
from pathlib import Path

from collectives.kit.grade import (
    Finished,
    checked_grading,
    finish,
    grade_folder,
    grading_options,
    judge,
    run_isolated,
)
from minidl.exercises import EXERCISES, find
from minidl.exercises.core import SEEDS, SKELETONS, Exercise, load, run, sha256


def _list() -> int:
    print(f"{len(EXERCISES)} exercises, in order: each needs only the ones above it.")
    print("You edit exercises/NN_name.py (made by `start NAME`, in the directory you run from);")
    print(f"the untouched skeletons are in {SKELETONS}, the reference solutions beside them in solutions/.\n")
    for ex in EXERCISES:
        mark = "*" if ex.workspace.exists() else " "
        print(f"{mark}{ex.number:2d}  {ex.name:<22} {ex.title}")
        print(f"      you write: {', '.join(ex.functions)};  taught in {ex.tutorial}")
    print("\n* = you have a copy in exercises/.  Then: python -m minidl.exercises check NAME [--submit]")
    return 0


def _start(ex: Exercise, force: bool) -> int:
    if ex.workspace.exists() and not force:
        print(f"{ex.workspace} exists already (--force to overwrite it with the skeleton)", file=sys.stderr)
        return 2
    try:
        ex.workspace.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(ex.skeleton, ex.workspace)
    except OSError as exc:  # ./exercises is a file, or the folder is not writable
        print(f"cannot copy the skeleton to {ex.workspace}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"copied the skeleton to {ex.workspace}: fill in the functions that raise NotImplementedError, then")
    print(f"  python -m minidl.exercises check {ex.name}")
    return 0


def _path(ex: Exercise, args: argparse.Namespace) -> Path | None:
    if args.solution:
        return ex.solution
    if args.file:
        return Path(args.file)
    if ex.workspace.exists():
        return ex.workspace
    print(f"(no {ex.workspace} here: checking the untouched skeleton; `start {ex.name}` copies it for you)")
    return ex.skeleton


def _check(ex: Exercise, args: argparse.Namespace) -> int:
    path = _path(ex, args)
    if path is None or not path.is_file():
        print(f"no such file: {path}", file=sys.stderr)
        return 2
    if args.seed is None and args.submit:
        args.seed = secrets.randbelow(2**31)
    if args.here:
        return _check_here(ex, path, args)
    try:
        done = run_isolated(_child(ex, path, args.submit, args.seed), timeout=args.time_limit)
    except KeyboardInterrupt:  # the check's process is ended with it
        print(f"interrupted: {ex.name} not checked", file=sys.stderr)
        return 130
    verdict, why, _ = _judge(ex, args.submit, done, f"{args.time_limit:g} s (--time-limit)")
    sys.stdout.write(done.output)
    if verdict == "passed":
        return 0
    if verdict != "failed":
        print(f"FAIL {ex.name}: {verdict}: {why}")
    return 1


def _child(ex: Exercise, path: Path, submit: bool, seed: int | None) -> list[str]:
    """The command that checks ``path`` in a process of its own."""
    cmd = [sys.executable, "-m", "minidl.exercises", "check", ex.name, "--file", str(path.resolve()), "--here"]
    return cmd + (["--submit", "--seed", str(seed)] if submit else [])


FAILED = re.compile(r"^FAIL(?: \S+)?: (?:property '([^']+)' broke|(not implemented yet: \S+))", re.M)
SMALLEST = re.compile(r"^  smallest case: (.+)$", re.M)


def _judge(ex: Exercise, submit: bool, done: Finished, limits: str) -> tuple[str, str, str]:
    """(verdict, property, case) of a child's check, as collectives.kit.grade.judge says them."""

    def passed(output: str) -> bool:
        return f"PASS {ex.name} ({'hidden' if submit else 'check'})" in output

    def failure(output: str) -> tuple[str, str] | None:
        found, case = FAILED.search(output), SMALLEST.search(output)
        return (found.group(1) or found.group(2), case.group(1) if case else "") if found else None

    def usage(output: str) -> str | None:
        lines = output.strip().splitlines()
        return lines[-1] if lines else None

    return judge(done, passed, failure, usage, limits)


def _check_here(ex: Exercise, path: Path, args: argparse.Namespace) -> int:
    """The check itself, in this process (the child of ``check``)."""
    print(f"checking {path}")
    outcome = run(ex, path, "check")
    if outcome.passed and args.submit:
        seed = args.seed
        print(f"{outcome.text}\nsubmit: fresh inputs from random seed {seed} (rerun with --seed {seed})")
        outcome = run(ex, path, "submit", seed)
        if outcome.passed:
            print(outcome.text)
            print(f"submit: {len(SEEDS)} hidden cases, compared by SHA-256 of the output (the values are not stored)")
            outcome = run(ex, path, "hidden")
    print(outcome.text)
    return 0 if outcome.passed else 1


def _hashes() -> int:
    """Print hashes.py, the HIDDEN table, from the reference solutions (for the maintainer)."""
    print('"""Generated by `python -m minidl.exercises hashes` from the reference solutions: do not edit by hand."""')
    print("\nHIDDEN: dict[str, tuple[str, ...]] = {")
    for ex in EXERCISES:
        module = load(ex.solution)
        print(f'    "{ex.name}": (')
        for seed in SEEDS:
            print(f'        "{sha256(ex.digest(module, seed))}",')
        print("    ),")
    print("}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m minidl.exercises", description="minidl's exercises and checkers")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("list", help="the exercises, in order, and where their files are")
    start = sub.add_parser("start", help="copy an exercise's skeleton to exercises/NN_name.py")
    start.add_argument("name")
    start.add_argument("--force", action="store_true")
    check = sub.add_parser("check", help="check your exercises/NN_name.py (exit 0 pass, 1 fail, 2 usage error)")
    check.add_argument("name", help="the exercise's name or number")
    which = check.add_mutually_exclusive_group()
    which.add_argument("--solution", action="store_true", help="check the reference solution instead")
    which.add_argument("--file", help="check this file instead")
    check.add_argument("--submit", action="store_true", help="also run fresh random inputs and the hidden cases")
    check.add_argument("--seed", type=int, help="the seed of --submit's random inputs (default: drawn now)")
    check.add_argument("--time-limit", type=float, default=180.0, help="seconds the check may run (default 180)")
    check.add_argument("--here", action="store_true", help=argparse.SUPPRESS)  # the child: no process of its own
    grade = sub.add_parser("grade", help="check --submit every copy of one exercise in DIR, each in its own process")
    grade.add_argument("grade", metavar="DIR", help="the folder of the class's copies")
    grade.add_argument("name", help="the exercise's name or number")
    grade.add_argument("--seed", type=int, help="the seed of --submit's random inputs, one for the class")
    grading_options(grade, "one copy's check")
    sub.add_parser("hashes", help="(maintainer) print the hidden cases' hashes from the reference solutions")
    args = parser.parse_args(argv)
    if getattr(args, "seed", None) is not None and args.seed < 0:
        parser.error(f"--seed {args.seed}: a seed is a non-negative integer")
    limit = getattr(args, "time_limit", 1.0)
    if not (math.isfinite(limit) and limit > 0):
        parser.error(f"--time-limit {limit:g}: a positive number of seconds")
    if args.command == "list":
        return _list()
    if args.command == "hashes":
        return _hashes()
    ex = find(args.name)
    if ex is None:
        print(f"no exercise {args.name!r}; `python -m minidl.exercises list` shows them", file=sys.stderr)
        return 2
    if args.command == "grade":
        return _grade(ex, args, parser)
    return _start(ex, args.force) if args.command == "start" else _check(ex, args)


def _grade(ex: Exercise, args: argparse.Namespace, parser: argparse.ArgumentParser) -> int:
    """Every copy of ``ex`` in the folder, ``check --submit`` in a process of its own, one seed for all."""
    folder, reports = checked_grading(args, parser)
    seed = args.seed if args.seed is not None else secrets.randbelow(2**31)
    limits = f"{args.timeout:g} s"
    print(f"grading {folder}/: exercise {ex.name}, --submit with seed {seed}, {limits} and {args.memory} MB each")
    graded = grade_folder(
        folder, lambda path, stem: _child(ex, path, True, seed), lambda done: _judge(ex, True, done, limits), reports,
        timeout=args.timeout, memory_mb=args.memory, cap=args.cap, file=args.file,
    )  # fmt: skip
    return finish(graded, args, reports)


if __name__ == "__main__":
    sys.exit(main())
