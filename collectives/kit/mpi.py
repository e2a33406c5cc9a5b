"""The kit on a real communicator: ``mpiexec -n P python -m collectives.check FILE.py:FN --mpi``.

The same cases and properties as in-process, with three differences that MPI imposes:
- p is the job's size. Smaller groups come from the layouts (reversed, halves, odd/even), made
  with the real ``MPI_Comm_split``.
- Cases are drawn as in-process (search.py), by a generator seeded alike on every rank, and a
  failure is shrunk the same way but for p, every candidate's verdict agreed by all ranks.
- Sends are made synchronous (``Ssend``, ``Issend``), as the in-process ranks make them, so a
  schedule that relies on MPI buffering short messages hangs here at every size; a watchdog on
  each rank ends a case that runs past ``--timeout``, printing the call that rank is blocked in,
  and aborts the job (exit status 1 from every rank's line, never a silent hang).
The repeatable property (a second call on the same communicator) is checked in-process only.
After every case the ranks agree on the verdict with MPI's own Allreduce; the report is gathered
to rank 0 as bytes. MPI's own collective (``MPI_Allreduce``, ...) is run on the same inputs and held
to the same reference, so a disagreement between the kit and the MPI library would show too.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import Any

import numpy as np

from collectives.common import OPS
from collectives.kit.cases import Case, groups, split_args
from collectives.kit.report import describe_failure, step_table
from collectives.kit.run import Outcome, _check
from collectives.kit.search import Domain, draw, shrink
from collectives.kit.spec import COLLECTIVES, wrong
from collectives.loc import _raw


class SyncComm:
    """A communicator whose sends are synchronous, and which remembers the call its rank is in."""

    def __init__(self, comm: Any):
        self.comm, self.current = comm, "nothing (computing)"

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    def _in(self, call: str, fn: Any, *args: Any) -> Any:
        self.current = call
        try:
            return fn(*args)
        finally:
            self.current = "nothing (computing)"

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self._in(f"Send(dest={dest}, tag={tag})", self.comm.Ssend, _raw(buf), dest, tag)

    def Recv(self, buf: Any, source: int = -2, tag: int = -1, status: Any = None) -> None:
        self._in(f"Recv(source={source}, tag={tag})", self.comm.Recv, _raw(buf), source, tag, status)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Any:
        return self.comm.Issend(_raw(buf), dest, tag)

    def Irecv(self, buf: Any, source: int = -2, tag: int = -1) -> Any:
        return self.comm.Irecv(_raw(buf), source, tag)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = -2,
                 recvtag: int = -1, status: Any = None) -> None:  # fmt: skip
        call = f"Sendrecv(dest={dest}, source={source})"
        self._in(call, self.comm.Sendrecv, _raw(sendbuf), dest, sendtag, _raw(recvbuf), source, recvtag, status)

    def Split(self, color: int = 0, key: int = 0) -> SyncComm:
        return SyncComm(self.comm.Split(color, key))

    def Barrier(self) -> None:
        self._in("Barrier()", self.comm.Barrier)


def draw_cases(collective: str, p: int, examples: int, seed: int, inplace: bool) -> list[Case]:
    """The edge cases at this p, then ``examples`` cases drawn as ``check`` draws them, alike on every rank."""
    rng, domain = np.random.default_rng([seed, p]), Domain.of(collective, inplace=inplace)
    op = "sum" if domain.reduces else None
    first = [Case(collective, p, n, "float64", op, inplace=inplace) for n in (0, 1)]
    return first + [draw(rng, domain, p=p) for _ in range(examples)]


def run_mpi_case(fn: Any, case: Case, world: Any, timeout: float) -> Outcome:
    """This rank's part of one case: its group's inputs, fn on the split communicator, the local properties."""
    spec, w = COLLECTIVES[case.collective], world.Get_rank()
    members = groups(case.p, case.layout)
    group = next(g for g in members if w in g)
    arrays = [spec.make(case, len(group), r, v) for r, v in enumerate(group)]  # any rank's input, from the seed
    out = Outcome(case, inputs=[{} for _ in range(case.p)], results=[None] * case.p, expected=[None] * case.p)
    for r, v in enumerate(group):
        out.inputs[v] = {k: (a.copy() if isinstance(a, np.ndarray) else a) for k, a in arrays[r].items()}
    mine = group.index(w)
    out.expected[w] = spec.expect(case, [out.inputs[v] for v in group], mine)
    color, key = (0, w) if case.layout == "world" else split_args(case.p, case.layout, w)
    sub = SyncComm(world.Split(color, key))
    f = OPS[case.op] if case.op else None
    watchdog = threading.Timer(timeout, _hung, (sub, case, w, timeout))
    watchdog.daemon = True
    watchdog.start()
    try:
        out.results[w] = spec.call(fn, sub, arrays[mine], case, len(group), mine, f)
    except Exception as exc:  # noqa: BLE001  (the user's code may raise anything: it is the finding)
        out.failures.append(("completes", f"rank {w} raised {type(exc).__name__}: {exc}"))
        sys.stderr.write(f"collectives.check: rank {w}: {case}: {type(exc).__name__}: {exc}\n")
        sys.stderr.flush()
    finally:
        watchdog.cancel()
    if not out.failures:
        full: list[dict] = [{} for _ in range(case.p)]
        full[w] = arrays[mine]
        _check(out, full, [[w]], None)  # this rank's own properties
        if spec.same_bits and isinstance(out.results[w], np.ndarray):
            _same_bits_across(out, sub.comm, w)
        _against_mpi(out, sub.comm, out.inputs[w], w)
    sub.comm.Free()
    return out


def _same_bits_across(out: Outcome, comm: Any, w: int) -> None:
    """Every rank of the group holds the same bits: compare a 64-bit digest of each rank's result."""
    import hashlib

    digest = np.frombuffer(hashlib.blake2b(out.results[w].tobytes(), digest_size=8).digest(), np.int64).copy()
    every = np.empty(comm.Get_size(), np.int64)
    comm.Allgather(digest, every)
    if len(set(every.tolist())) > 1:
        out.failures.append(("same-bits", f"rank {w}'s result bits differ from another rank's of its group"))


MPI_CALLS = {  # collective -> MPI's own call on this rank's inputs: (comm, x, op, root, q) -> the result or None
    "allreduce": lambda c, x, op, root, q: _out(c.Allreduce, x, x.size, op),
    "reduce": lambda c, x, op, root, q: _out(c.Reduce, x, x.size, op, root, keep=c.Get_rank() == root),
    "allgather": lambda c, x, op, root, q: _out(c.Allgather, x, q * x.size),
    "alltoall": lambda c, x, op, root, q: _out(c.Alltoall, x, x.size),
    "scan": lambda c, x, op, root, q: _out(c.Scan, x, x.size, op),
    "exscan": lambda c, x, op, root, q: _out(c.Exscan, x, x.size, op, keep=c.Get_rank() > 0),
}


def _out(call: Any, x: np.ndarray, size: int, op: Any = None, root: int | None = None, keep: bool = True) -> Any:
    out = np.zeros(size, x.dtype)
    args = [x, out] + ([op] if op is not None else []) + ([root] if root is not None else [])
    call(*args)
    return out if keep else None


def _against_mpi(out: Outcome, comm: Any, arrays: dict, w: int) -> None:
    """MPI's own collective on the same inputs, held to the same reference (where mpi4py has the call)."""
    from mpi4py import MPI

    case, want = out.case, out.expected[w]
    call, x = MPI_CALLS.get(case.collective), arrays.get("x")
    if call is None or case.inplace or x is None or x.dtype.names is not None or x.dtype == np.float16:
        return
    if case.values == "special":  # MPI leaves MAX/MIN of a NaN undefined (MPICH compares: a NaN may vanish)
        return
    op = getattr(MPI, case.op.upper()) if case.op else None
    try:
        got = call(comm, x, op, case.root % comm.Get_size(), comm.Get_size())
    except MPI.Exception:  # an op MPI does not define for this type (MPICH: MIN on C_BOOL): no oracle here
        return
    if want is not None and got is not None and wrong(got, want, case.op).any():
        out.failures.append(("oracle", f"MPI's own {case.collective} disagrees with NumPy's reference on rank {w}"))


def _hung(sub: SyncComm, case: Case, w: int, timeout: float) -> None:
    sys.stderr.write(  # one write, so that the ranks' lines do not interleave
        f"collectives.check: rank {w}: {case}: property 'completes' failed: no return after {timeout:g} s, "
        f"blocked in {sub.current} (sends are synchronous: a schedule that needs MPI to buffer deadlocks)\n"
    )
    sys.stderr.flush()
    os._exit(1)  # mpiexec then ends the job on every rank


def check_mpi(fn: Any, args: Any) -> int:
    """Run the cases on MPI.COMM_WORLD; 0 if every property holds, 1 with the shrunk report on rank 0."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    fresh = int(np.random.SeedSequence().entropy) % 2**31  # type: ignore[arg-type]
    seed = np.array([args.seed if args.seed is not None else fresh], np.int64)
    world.Bcast(seed, root=0)
    p, rank = world.Get_size(), world.Get_rank()
    for case in draw_cases(args.collective, p, args.examples, int(seed[0]), args.inplace):
        if _failed(run_mpi_case(fn, case, world, args.timeout), world):
            return _report(fn, _shrink(fn, case, world, args.timeout), world, args)
    if rank == 0:
        print(
            f"{args.target}: {args.collective}: every property held on {args.examples + 2} cases at p = {p} under MPI"
        )
    return 0


def _failed(out: Outcome, world: Any) -> bool:
    from mpi4py import MPI

    flag = np.array([int(not out.ok)], np.int64)
    world.Allreduce(MPI.IN_PLACE, flag, op=MPI.MAX)
    return bool(flag[0])


def _shrink(fn: Any, case: Case, world: Any, timeout: float) -> Case:
    """The search's shrinking at this p (the job's size), each candidate's verdict agreed by every rank."""
    domain = Domain.of(case.collective, inplace=case.inplace)
    return shrink(case, lambda c: _failed(run_mpi_case(fn, c, world, timeout), world), domain, shrink_p=False)


def _report(fn: Any, case: Case, world: Any, args: Any) -> int:
    """Every rank's part of the report, gathered to rank 0 as bytes and printed there."""
    out = run_mpi_case(fn, case, world, args.timeout)
    w = world.Get_rank()
    text = "" if out.ok else f"rank {w}: " + "; ".join(f"{p}: {m}" for p, m in out.failures)
    if out.expected[w] is not None and out.results[w] is not None:
        text += f"\n  rank {w}: expected {out.expected[w].value!r}\n  rank {w}: got      {out.results[w]!r}"
    lines = _gather_text(text, world)
    if w == 0:
        print(f"{getattr(fn, '__qualname__', fn)} fails under MPI at p = {case.p}; smallest failing case: {case}")
        print("\n".join(line for line in lines if line))
        local = _local(fn, case)
        if not local.ok:
            print(
                "the same case on in-process ranks:\n"
                + str(describe_failure(fn, local, args.diagram)).split("\n", 1)[1]
            )
        else:
            print("the same case passes on in-process ranks; its messages, step by step:")
            print("\n".join("  " + row for row in step_table(fn, case)[0]))
    return 1


def _gather_text(text: str, world: Any) -> list[str]:
    data = np.frombuffer(text.encode(), np.uint8)
    counts = np.zeros(world.Get_size(), np.int64)
    world.Allgather(np.array([data.size], np.int64), counts)
    buf = np.empty(int(counts.sum()), np.uint8)
    world.Allgatherv(data, [buf, counts])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return [bytes(buf[offsets[i] : offsets[i + 1]]).decode() for i in range(world.Get_size())]


def _local(fn: Any, case: Case) -> Outcome:
    """The same case on in-process ranks, for the step table and the diagram of the report."""
    from collectives.kit.run import run_case

    return run_case(fn, case)
