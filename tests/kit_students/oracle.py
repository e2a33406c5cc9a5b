"""An independent oracle for the student files: runs one of them under real MPI and compares with NumPy.

It does not use collectives' kit. Run it under mpiexec:

    mpiexec -n P python tests/kit_students/oracle.py FILE FUNCTION --collective allreduce \\
        --signature send,recv,comm,op --n 10 [--n 1000 ...] [--ops sum,max] [--root 0] [--calls 2]

Every rank draws its input from the seed (so every rank knows every input), calls the function
`--calls` times per (n, op) on a duplicate of COMM_WORLD (or, with --comm reversed, on a communicator
whose ranks are COMM_WORLD's in reverse order; inputs and root go by the rank in that communicator), and checks on every rank: the result against
NumPy (allreduce/reduce: the sum or maximum over ranks; broadcast: the root's input; allgather: the
inputs side by side), that the inputs are unchanged, the result's shape and dtype, that a reduce's
non-root ranks return None and leave `recv` as it was (zeros), and that every rank holds the same bits.
Rank 0 prints one JSON line, the verdict:

- ``{"verdict": "ok", ...}`` and exit 0;
- ``{"verdict": "wrong", "failed": {"result": [[rank, call, n, op], ...], ...}}`` and exit 1;
- ``{"verdict": "error", "rank": r, "error": "..."}`` (an exception in the student's code) and exit 4
  (through MPI_Abort, so the others stop);
- ``{"verdict": "hung", "rank": r, ...}`` from the first rank whose call ran past ``--timeout`` and exit 3.

A job MPICH aborts itself (an internal error) prints no JSON and exits non-zero.

`--batch MANIFEST` checks, in one job, every manifest run that expects "ok" at this world size (one
verdict line per run, in manifest order): a test starts 4 jobs instead of one per file and size.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import threading
import time

import numpy as np
from mpi4py import MPI  # initialised here, before the student's module (which may set mpi4py.rc)

PROPS = ("result", "inputs-untouched", "shape-dtype", "same-bits", "nonroot-untouched")
ROLE_ALIASES = {"send": "x", "sendbuf": "x", "recvbuf": "recv", "buf": "x"}


def _load(path: str, name: str):
    spec = importlib.util.spec_from_file_location(f"student_{os.path.basename(path)[:-3]}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, name)


def _inputs(seed: int, call: int, p: int, n: int) -> list[np.ndarray]:
    """Every rank's input for one call (every rank can compute all of them)."""
    return [np.random.default_rng([seed, call, r, n]).standard_normal(n) for r in range(p)]


def _expected(collective: str, op: str, xs: list[np.ndarray], root: int) -> np.ndarray:
    if collective in ("allreduce", "reduce"):
        ufunc = np.add if op == "sum" else np.maximum
        return ufunc.reduce(np.stack(xs), axis=0)
    if collective == "broadcast":
        return xs[root]
    if collective == "allgather":
        return np.concatenate(xs)
    raise SystemExit(f"oracle: unknown collective {collective}")


def _op(style: str, name: str):
    if style == "mpi":
        return {"sum": MPI.SUM, "max": MPI.MAX}[name]
    if style == "ufunc":
        return {"sum": np.add, "max": np.maximum}[name]
    return {"sum": lambda a, b: a + b, "max": lambda a, b: np.maximum(a, b)}[name]


class Watchdog:
    """A thread that ends the job with a 'hung' verdict when one call runs past the timeout."""

    def __init__(self, timeout: float, rank: int, info: dict):
        self.timeout, self.rank, self.info = timeout, rank, info
        self.deadline = None
        threading.Thread(target=self._watch, daemon=True).start()

    def _watch(self) -> None:
        while True:
            time.sleep(0.05)
            if self.deadline is not None and time.monotonic() > self.deadline:
                print(json.dumps({"verdict": "hung", "rank": self.rank, **self.info}), flush=True)
                os._exit(3)


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser()
    ap.add_argument("file", nargs="?")
    ap.add_argument("function", nargs="?")
    ap.add_argument("--collective", default="allreduce")
    ap.add_argument("--signature", default="send,recv,comm,op")
    ap.add_argument("--n", type=int, action="append")
    ap.add_argument("--ops", default="sum")
    ap.add_argument("--op-style", choices=("python", "mpi", "ufunc"), default="python")
    ap.add_argument("--root", type=int, default=0)
    ap.add_argument("--calls", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=10.0)
    ap.add_argument("--comm", choices=("dup", "reversed"), default="dup", help="reversed: ranks in reverse order")
    ap.add_argument("--batch", metavar="MANIFEST", help="every manifest run expected 'ok' at this world size")
    args = ap.parse_args(argv)
    if args.batch is None and (args.file is None or args.function is None or not args.n):
        ap.error("FILE FUNCTION and --n are required (or --batch MANIFEST)")
    return args


def batch(manifest: str) -> list[argparse.Namespace]:
    """The runs of a manifest that expect 'ok' at this world size, as argument sets (one job checks them all)."""
    entries = json.loads(open(manifest).read())["files"]
    folder = os.path.dirname(os.path.abspath(manifest))
    runs = []
    for e in entries:
        for run in e["mpi_runs"]:
            if run["p"] == MPI.COMM_WORLD.Get_size() and run["expect"] == ["ok"] and "comm" not in run:
                argv = [os.path.join(folder, e["file"]), e["function"], "--collective", e["collective"]]
                argv += ["--signature", e["signature"], "--op-style", e.get("op_style", "python")]
                argv += ["--ops", run.get("ops", "sum"), "--root", str(run.get("root", 0))]
                argv += ["--calls", str(run.get("calls", 2)), *[f"--n={n}" for n in run["n"]]]
                runs.append(parse(argv))
    return runs


def judge(args: argparse.Namespace, dog: Watchdog) -> int:
    """Check one function on one set of cases; rank 0 prints the verdict line. Returns the exit code."""
    world = MPI.COMM_WORLD
    rank, p = world.Get_rank(), world.Get_size()
    root = args.root % p
    roles = [ROLE_ALIASES.get(r.strip(), r.strip()) for r in args.signature.split(",")]
    fn = _load(args.file, args.function)
    comm = world.Dup() if args.comm == "dup" else world.Split(0, p - 1 - rank)
    me = comm.Get_rank()  # the rank the student's code sees: inputs and root go by it
    info = {"file": os.path.basename(args.file), "p": p}
    dog.info, dog.timeout = info, args.timeout
    failed = []  # (property, call, n, op) on this rank

    call = 0
    for n in args.n:
        for op in args.ops.split(","):
            for _ in range(args.calls):
                xs = _inputs(args.seed, call, p, n)
                x = xs[me].copy()
                want = _expected(args.collective, op, xs, root)
                recv = np.zeros_like(want) if "recv" in roles else None
                values = {"comm": comm, "x": x, "recv": recv, "root": root}
                values["op"] = values["f"] = _op("ufunc" if "f" in roles else args.op_style, op)
                info.update(n=n, op=op, call=call)
                dog.deadline = time.monotonic() + dog.timeout
                try:
                    out = fn(*[values[r] for r in roles])
                except Exception as exc:  # the student's code raised: report it, stop every rank
                    err = f"{type(exc).__name__}: {exc}".splitlines()[0][:300]
                    print(json.dumps({"verdict": "error", "rank": rank, **info, "error": err}), flush=True)
                    world.Abort(4)
                got = recv if recv is not None else out
                is_root_only = args.collective == "reduce" and me != root
                if not np.array_equal(x, xs[me]):
                    failed.append(("inputs-untouched", call, n, op))
                if is_root_only:
                    if (recv is not None and np.any(recv != 0)) or (recv is None and out is not None):
                        failed.append(("nonroot-untouched", call, n, op))
                    mine = np.zeros_like(want)
                elif not isinstance(got, np.ndarray) or got.shape != want.shape or got.dtype != want.dtype:
                    failed.append(("shape-dtype", call, n, op))
                    mine = np.zeros_like(want)
                else:
                    scale = float(np.abs(np.stack(xs)).sum(axis=0).max(initial=1.0))
                    if not np.allclose(got, want, rtol=1e-12, atol=1e-12 * scale * p):
                        failed.append(("result", call, n, op))
                    mine = np.ascontiguousarray(got)
                if args.collective != "reduce":  # every rank must hold the same bits
                    everyone = np.empty((p,) + want.shape, want.dtype)
                    world.Allgather(mine, everyone)
                    if not all(np.array_equal(everyone[0], e) for e in everyone):
                        failed.append(("same-bits", call, n, op))
                dog.deadline = None
                call += 1

    # rank 0 collects every rank's failures as a (rank, property, call) table of flags
    flags = np.zeros((len(PROPS), call), dtype=np.int64)
    for prop, c, _, _ in failed:
        flags[PROPS.index(prop), c] = 1
    table = np.zeros((p,) + flags.shape, dtype=np.int64) if rank == 0 else None
    info.update(n=args.n, op=args.ops, call="the oracle's final gather")
    dog.deadline = time.monotonic() + dog.timeout
    world.Gather(flags, table, root=0)
    if rank == 0:
        cases = [(n, op) for n in args.n for op in args.ops.split(",") for _ in range(args.calls)]
        report: dict[str, list] = {}
        for r, i, c in zip(*np.nonzero(table)):
            report.setdefault(PROPS[i], []).append([int(r), int(c), *cases[c]])
        verdict = "wrong" if report else "ok"
        summary = {"verdict": verdict, "file": info["file"], "p": p, "n": args.n, "ops": args.ops, "root": args.root}
        summary["calls"] = call
        print(json.dumps({**summary, "failed": report}), flush=True)
        code = 1 if report else 0
    else:
        code = 0
    comm.Free()
    world.Barrier()
    return code


def main() -> int:
    args = parse()
    dog = Watchdog(args.timeout, MPI.COMM_WORLD.Get_rank(), {})
    targets = batch(args.batch) if args.batch else [args]
    return max([judge(t, dog) for t in targets], default=0)


if __name__ == "__main__":
    sys.exit(main())
