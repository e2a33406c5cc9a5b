"""``python -m collectives.check FILE.py:FUNCTION --collective allreduce``: property-test your own collective.

    python -m collectives.check my_ring.py:allreduce                      # in-process ranks 1..16
    python -m collectives.check my_ring.py:allreduce --examples 500 --seed 3 --cost ring
    python -m collectives.check hw3.py:ring --signature send,recv,comm,op --dtypes float64 --ops sum --min-n p
    mpiexec -n 4 python -m collectives.check my_ring.py:allreduce --mpi  # the real communicator, against MPI's own call
    python -m collectives.check --grade submissions/ --collective allreduce --json grades.json   # a class

Exit status: 0 when every property holds, 1 with the shrunk counterexample (printed), 2 on a
usage error (no such file or function, a signature that cannot be called as the collective's, an
mpi4py name the in-process ranks do not offer). The properties, the signatures (roles.py) and the
report are collectives.testing's (see its docstring).
"""

from __future__ import annotations

import argparse
import importlib.util
import inspect
import math
import sys
import traceback
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from collectives.kit.spec import COLLECTIVES


class UsageError(Exception):
    """A command line that cannot be run: exit 2 with this one line."""


def load_function(target: str) -> Callable[..., Any]:
    """'path/to/file.py:name' -> the function (a module path 'pkg.mod:name' works too)."""
    where, sep, name = target.rpartition(":")
    if not sep or not where or not name:
        raise UsageError(f"expected FILE.py:FUNCTION, got {target!r}")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise UsageError(f"no such file: {where}")
        spec = importlib.util.spec_from_file_location(path.stem, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.path.insert(0, str(path.parent.resolve()))  # the user's file may import its neighbours
        _import(where, lambda: spec.loader.exec_module(module))  # type: ignore[union-attr]
    else:
        module = _import(where, lambda: importlib.import_module(where))
    fn = getattr(module, name, None)
    if not callable(fn):
        raise UsageError(f"{where} has no function {name!r}")
    return fn


KIT_FRAMES = ("importlib", "<frozen")  # frames of the import machinery, not of the user's module


def _import(where: str, load: Callable[[], Any]) -> Any:
    """Run the user's module-level code; what it raises (a syntax error, an exception, sys.exit) is one line."""
    try:
        return load()
    except SyntaxError as exc:
        raise UsageError(f"cannot import {where}: SyntaxError at {exc.filename}:{exc.lineno}: {exc.msg}") from None
    except (Exception, SystemExit) as exc:  # noqa: BLE001  (the user's module-level code may raise anything)
        tb = traceback.extract_tb(exc.__traceback__)
        user = [fr for fr in tb if fr.filename != __file__ and not any(k in fr.filename for k in KIT_FRAMES)]
        line = f" at {user[-1].filename}:{user[-1].lineno}" if user else ""
        raise UsageError(f"cannot import {where}: importing it raised {type(exc).__name__}: {exc}{line}") from None


def check_signature(fn: Callable[..., Any], collective: str, inplace: bool, roles: Sequence[str] | None = None) -> None:
    """Raise UsageError unless fn can be called with the collective's arguments (or the roles named)."""
    spec = COLLECTIVES[collective]
    signature = spec.inplace if inplace else spec.signature
    if roles:
        signature = f"fn({', '.join(roles)})"
    nargs = signature.count(",") + 1
    try:
        inspect.signature(fn).bind(*range(nargs))
    except TypeError as exc:
        raise UsageError(f"{getattr(fn, '__name__', fn)} cannot be called as {signature}: {exc}") from None
    except ValueError:
        pass  # no signature to inspect (a builtin): let the run say


MAX_THREAD_RANKS = 64  # in-process ranks are threads of one process: a ring at p = 128 takes 0.6 s a case here


def bad_values(args: argparse.Namespace) -> str:
    """The option value that cannot be run, said in one line, or "": checked before any case runs."""
    from collectives.cost import ALGORITHMS

    if args.seed is not None and args.seed < 0:
        return f"--seed {args.seed}: a seed is a non-negative integer"
    if not (math.isfinite(args.timeout) and args.timeout > 0):
        return f"--timeout {args.timeout:g}: seconds a case may run, a positive number"
    if args.max_ranks > MAX_THREAD_RANKS and not args.mpi:
        return (
            f"--max-ranks {args.max_ranks}: the in-process ranks are threads of one process, at most "
            f"{MAX_THREAD_RANKS}; for more ranks run under mpiexec with --mpi"
        )
    if args.cost is not None and args.cost not in ALGORITHMS:
        return f"--cost {args.cost}: not a package algorithm; expected one of {', '.join(ALGORITHMS)}"
    return contract_problem(args)


def contract_problem(args: argparse.Namespace) -> str:
    """The signature and contract options, checked: one line naming the bad one, or ""."""
    from collectives.kit import roles
    from collectives.kit.search import Domain

    try:
        args.roles = roles.parse(args.signature, args.collective, args.inplace)
    except ValueError as exc:
        return str(exc)
    if args.min_ranks < 1 or (not args.mpi and args.min_ranks > args.max_ranks):
        return f"--min-ranks {args.min_ranks}: at least 1 and at most --max-ranks ({args.max_ranks})"
    if args.min_n != "p" and not (args.min_n.isdigit()):
        return f"--min-n {args.min_n}: a number of elements, or p (at least as many elements as ranks)"
    args.min_n = args.min_n if args.min_n == "p" else int(args.min_n)
    args.dtypes = [d for d in args.dtypes.split(",") if d] if args.dtypes else None
    args.ops = [o for o in args.ops.split(",") if o] if args.ops else None
    try:
        Domain.of(args.collective, args.dtypes, args.ops, None, True, args.inplace, 1, args.min_n)
    except ValueError as exc:
        flag = "--ops" if "op" in str(exc).split(" ")[1] else "--dtypes"
        return f"{flag}: {exc}"
    return ""


def parse(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m collectives.check", description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    ap.add_argument("target", metavar="FILE.py:FUNCTION", help="the function to check")
    ap.add_argument("--collective", default="allreduce", choices=list(COLLECTIVES), help="default: allreduce")
    ap.add_argument("--max-ranks", type=int, default=16, help="world sizes 1..N in-process (default 16)")
    ap.add_argument("--examples", type=int, default=100, help="cases to draw (default 100)")
    ap.add_argument("--seed", type=int, default=None, help="the search's seed (default: a fresh one each run)")
    ap.add_argument("--inplace", action="store_true", help="the in-place form (allreduce, allgather)")
    ap.add_argument(
        "--cost", default=None, help="hold the messages and bytes to a package algorithm's model, e.g. ring"
    )
    ap.add_argument("--timeout", type=float, default=20.0, help="seconds a case may run before it counts as hung")
    ap.add_argument("--diagram", default=None, help="where to save the failure's space-time diagram (PNG)")
    ap.add_argument("--mpi", action="store_true", help="run on MPI.COMM_WORLD (under mpiexec) against MPI's own call")
    course = ap.add_argument_group(
        "a course's signature and contract (default: the kit's signature, the full contract)"
    )
    course.add_argument(
        "--signature", default=None, metavar="ROLES",
        help="the function's parameters by role, e.g. send,recv,comm,op (roles: comm, x|send|sendbuf, buf, "
        "recv|recvbuf, f, op, mpiop, root, b, counts, out, sb, rb)",
    )  # fmt: skip
    course.add_argument("--dtypes", default=None, metavar="LIST", help="e.g. float32,float64 (default: every dtype)")
    course.add_argument("--ops", default=None, metavar="LIST", help="e.g. sum,max (default: every op)")
    course.add_argument("--min-ranks", type=int, default=1, metavar="N", help="the smallest world size (default 1)")
    course.add_argument("--min-n", default="0", metavar="N|p", help="the fewest elements: a number, or p (n >= p)")
    args = ap.parse_args(argv)
    if args.max_ranks < 1 or args.examples < 1:
        ap.error("--max-ranks and --examples must be at least 1")
    bad = bad_values(args)
    if bad:
        ap.error(bad)
    if args.inplace and not COLLECTIVES[args.collective].inplace:
        ap.error(f"--inplace: {args.collective} has no in-place form")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if any(a == "--grade" or a.startswith("--grade=") for a in argv):  # a class's files, each in its own process
        from collectives.kit.grade import main as grade

        return grade(argv, parse)  # the check's own parser, for the options it passes on
    try:
        args = parse(argv)  # argparse exits 2 on its own errors
    except SystemExit as stop:
        if stop.code and "--mpi" in argv:
            agree_usage("bad command line")  # the other ranks of the job learn of it too
        raise
    if args.mpi:
        from mpi4py import MPI  # noqa: F401  (initialised before the user's module, which may set mpi4py.rc)
    problem = ""
    try:
        fn = load_function(args.target)
        check_signature(fn, args.collective, args.inplace, args.roles)
    except UsageError as exc:
        problem = str(exc)
    if args.mpi:
        problem = agree_usage(problem)
    if problem:
        print(f"collectives.check: {problem}", file=sys.stderr)
        return 2
    if args.mpi:
        from collectives.kit.mpi import check_mpi

        return check_mpi(fn, args)
    from collectives.inprocess import NotOffered
    from collectives.testing import PropertyFailure, check

    try:
        report = check(
            fn, args.collective, max_ranks=args.max_ranks, examples=args.examples, seed=args.seed,
            inplace=args.inplace, cost=args.cost, timeout=args.timeout, diagram=args.diagram,
            signature=args.roles, dtypes=args.dtypes, ops=args.ops, min_ranks=args.min_ranks, min_n=args.min_n,
        )  # fmt: skip
    except PropertyFailure as failure:
        print(failure)
        return 1
    except NotOffered as exc:
        print(f"collectives.check: {exc}", file=sys.stderr)
        return 2
    print(f"{args.target}: {report}")
    return 0


def agree_usage(problem: str) -> str:
    """Under MPI, whether any rank's command line failed, agreed by every rank before any case runs: the
    ranks of an MPMD job (``mpiexec -n 1 ... a.py:f --mpi : -n 1 ... b.py:f --mpi``) may differ. MPI is
    initialised here, before the user's module is imported on the ranks that got this far."""
    import numpy as np
    from mpi4py import MPI

    flag = np.array([int(bool(problem))], np.int64)
    MPI.COMM_WORLD.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
    return problem or ("another rank's command line failed (its line says why)" if flag[0] else "")


if __name__ == "__main__":
    sys.exit(main())
