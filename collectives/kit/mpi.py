"""The kit on a real communicator: ``mpiexec -n P python -m collectives.check FILE.py:FN --mpi``.

The same cases and properties as in-process, with the differences that MPI imposes:
- p is the job's size. Smaller groups come from the layouts (reversed, halves, odd/even), made
  with the real ``MPI_Comm_split``; the report says which sizes this run could not try.
- Cases are drawn as in-process (search.py), by a generator seeded alike on every rank, and a
  failure is shrunk the same way but for p, every candidate's verdict (its first broken property)
  agreed by all ranks.
- The user's code gets a ``WatchedComm``: sends are synchronous (``Issend``), as the in-process ranks
  make them, so a schedule that relies on MPI buffering short messages hangs here at every size;
  and every call that waits (Send, Recv, Sendrecv, Wait, Waitall, Test, Probe, Barrier, the
  lower-case object calls) waits by polling, so a rank never waits past ``--timeout``: it gives up
  naming the call and its line, and when a peer raised, the peer's error, which reaches it on a
  communicator of the kit's own. The case then ends on every rank with a verdict, and the search
  goes on (shrinking included) after a deadlock, as in-process.
- The communicators return errors as exceptions (MPI.ERRORS_RETURN): a truncation or a dtype
  mismatch is the property ``truncation`` on the rank that received, not an aborted job.
- request-completed and send-buffer-untouched are checked as in-process: the requests the
  function left open when it returned, and each nonblocking send's buffer before and after its wait.
The user's module is executed again with ``mpi4py.MPI`` whose ``Request`` (Waitall, ...) waits by
polling and whose ``COMM_WORLD`` is watched too; everything else is the real MPI's. After every
case the ranks agree on the verdict with MPI's own Allreduce; the report is gathered to rank 0 as
bytes. MPI's own collective (``MPI_Allreduce``, ...) is run on the same inputs and held to the same
reference, so a disagreement between the kit and the MPI library would show too.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from collectives.common import OPS
from collectives.communicators import NonblockingSendrecv
from collectives.inprocess import Violation, _as_bytes, caller, element_size, type_mismatch
from collectives.kit import roles as signature_roles
from collectives.kit.cases import Case, groups, ops_for, split_args
from collectives.kit.namespace import ModuleCopies
from collectives.kit.report import describe_failure, step_table
from collectives.kit.run import MPI_ERRORS, PROPERTIES, Outcome, _check, _order, _raised, _shape_problem
from collectives.kit.search import Domain, draw, shrink
from collectives.kit.spec import COLLECTIVES, wrong

STUCK = (
    "sends are synchronous here: a schedule that needs MPI to buffer its sends deadlocks, as does a receive "
    "from a rank that never sends it"
)
POLL_S = 2e-4  # between two tests of a pending call: short next to a message, long next to a Test
REPEATS = 3  # runs of a found case under MPI that tell a steady failure from an intermittent one


class Hung(Exception):
    """A call that waited past the case's deadline."""


class PeerFailed(Exception):
    """A call given up because another rank's function raised (its error is the message)."""


class Watch:
    """This rank's state for the case that runs: its deadline, the call it is in, what it left open."""

    def __init__(self, control: Any, timeout: float):
        self.control, self.timeout = control, timeout
        self.case_id, self.deadline = 0, float("inf")
        self.current, self.where = "nothing (computing)", ""
        self.open: list[Req] = []
        self.violations: list[Violation] = []
        self.notices: list[Any] = []  # the kit's own sends of this rank's error to the others

    def start(self, case_id: int) -> None:
        self.case_id, self.deadline = case_id, time.monotonic() + self.timeout
        self.open, self.violations = [], []
        self.drain()

    def drain(self) -> None:
        """Receive and drop the notices of earlier cases (a rank that never blocked did not read them)."""
        from mpi4py import MPI

        status = MPI.Status()
        while self.control.Iprobe(MPI.ANY_SOURCE, MPI.ANY_TAG, status):
            if status.Get_tag() >= self.case_id:
                return
            self.control.Recv(bytearray(status.Get_count()), status.Get_source(), status.Get_tag())

    def poll(self, done: Callable[[], bool], call: str) -> None:
        """Wait until ``done()`` by testing, giving up at the deadline or on a peer's error notice."""
        from mpi4py import MPI

        if done():
            return
        self.current, self.where = call, caller()
        status = MPI.Status()
        while not done():
            if self.control.Iprobe(MPI.ANY_SOURCE, self.case_id, status):
                text = bytearray(status.Get_count())
                self.control.Recv(text, status.Get_source(), self.case_id)
                raise PeerFailed(
                    f"blocked in {call} at {self.where} when rank {status.Get_source()} failed: {text.decode()}"
                )
            if time.monotonic() > self.deadline:
                raise Hung(f"no return after {self.timeout:g} s, blocked in {call} at {self.where} ({STUCK})")
            time.sleep(POLL_S)
        self.current, self.where = "nothing (computing)", ""

    def tell_others(self, text: str) -> None:
        """Send this rank's error to every other rank, so that one waiting on it names it."""
        data = np.frombuffer(text.encode()[:2000], np.uint8).copy()
        me = self.control.Get_rank()
        for other in range(self.control.Get_size()):
            if other != me:
                self.notices.append((self.control.Isend(data, other, self.case_id), data))


class Req:
    """A request of the user's, waited on by polling: upper case (a buffer) or lower case (an object)."""

    def __init__(self, watch: Watch, request: Any, call: str, buf: Any = None, recv: Callable[[], Any] | None = None,
                 kind: str = "send", peer: int = -2):  # fmt: skip
        self.watch, self.request, self.call, self.where = watch, request, call, caller()
        self.kind, self.peer = kind, peer
        self.buf = _array(buf)
        self.itemsize = element_size(buf) if kind == "recv" and buf is not None else 1
        self.sent = self.buf.copy() if self.buf is not None and call in ("Isend", "Issend") else None  # nonblocking
        self.receive = recv  # a lower-case receive: a matched probe, then the object
        self.obj: Any = None
        self.done = False
        watch.open.append(self)

    def _test(self, status: Any = None) -> bool:
        if self.done:
            return True
        if self.receive is not None:
            got = self.receive()
            if got is None:
                return False
            self.obj = got[0]
        else:
            from mpi4py import MPI

            status = MPI.Status() if status is None else status
            if not self.request.Test(status):
                return False
            nbytes = status.Get_count(MPI.BYTE)
            if nbytes % self.itemsize:
                me = self.watch.control.Get_rank()
                self.watch.violations.append(type_mismatch(me, nbytes, self.itemsize, status.Get_source(), self.where))
        self.done = True
        self._finished()
        return True

    def _finished(self) -> None:
        if self in self.watch.open:
            self.watch.open.remove(self)
        if self.sent is not None and self.buf is not None and not np.array_equal(self.sent, self.buf):
            self.watch.violations.append(
                Violation(
                    "send-buffer-untouched", self.watch.control.Get_rank(),
                    f"its {self.call}'s buffer was written before the request completed", self.where,
                )
            )  # fmt: skip

    def Wait(self, status: Any = None) -> bool:
        self.watch.poll(lambda: self._test(status), f"{self.call}(...).Wait()")
        return True

    def wait(self, status: Any = None) -> Any:
        self.Wait(status)
        return self.obj

    def Test(self, status: Any = None) -> bool:
        return self._test(status)

    def test(self, status: Any = None) -> tuple[bool, Any]:
        done = self._test(status)
        return done, self.obj if done else None

    def Free(self) -> None:
        if self in self.watch.open:
            self.watch.open.remove(self)

    def Cancel(self) -> None:
        if self.request is not None:
            self.request.Cancel()

    @staticmethod
    def Waitall(requests: Any, statuses: Any = None) -> bool:
        reqs = [r for r in requests if r is not None]
        if reqs:
            stats = statuses or [None] * len(reqs)
            reqs[0].watch.poll(lambda: all([r._test(s) for r, s in zip(reqs, stats)]), "Request.Waitall(...)")
        return True

    @staticmethod
    def waitall(requests: Any, statuses: Any = None) -> list[Any]:
        Req.Waitall(requests, statuses)
        return [r.obj for r in requests]

    @staticmethod
    def Waitany(requests: Any, status: Any = None) -> int:
        reqs = list(requests)
        found: list[int] = []

        def any_done() -> bool:
            found[:] = [i for i, r in enumerate(reqs) if r._test(status)][:1]
            return bool(found)

        if reqs:
            reqs[0].watch.poll(any_done, "Request.Waitany(...)")
        return found[0] if found else -32766

    @staticmethod
    def waitany(requests: Any, status: Any = None) -> tuple[int, Any]:
        i = Req.Waitany(requests, status)
        return i, requests[i].obj

    @staticmethod
    def Testall(requests: Any, statuses: Any = None) -> bool:
        return all([r._test() for r in requests])

    @staticmethod
    def testall(requests: Any, statuses: Any = None) -> tuple[bool, list[Any] | None]:
        done = Req.Testall(requests)
        return done, [r.obj for r in requests] if done else None


def _peer(source: int) -> str:
    return "ANY_SOURCE" if source == -2 else str(source)


def _tag(tag: int) -> str:
    return "ANY_TAG" if tag == -1 else str(tag)


def _array(buf: Any) -> np.ndarray | None:
    """The bytes a buffer or an mpi4py buffer spec names (a flat uint8 view), or None for anything else."""
    try:
        return _as_bytes(buf, writable=False, what="buffer")
    except (TypeError, ValueError):
        return None


def _raw(buf: Any) -> Any:
    """What MPI is given: the buffer's bytes (MPI.BYTE), so that a type mismatch between a send and its
    receive is the kit's verdict (MPICH asserts and aborts the job on one); anything else as it is."""
    data = _array(buf)
    return buf if data is None else data


class WatchedComm(NonblockingSendrecv):
    """A real communicator whose sends are synchronous and whose waits poll (``Watch``); everything
    else is the real communicator's."""

    def __init__(self, comm: Any, watch: Watch):
        self.comm, self.watch = comm, watch

    @property
    def current(self) -> str:
        return self.watch.current

    def __getattr__(self, name: str) -> Any:
        return getattr(self.comm, name)

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    rank = property(Get_rank)
    size = property(Get_size)

    def _aliasing(self, buf: Any, kind: str) -> None:
        mine = _array(buf)
        for other in self.watch.open:
            theirs = other.buf
            if mine is None or theirs is None or other.receive is not None:
                continue
            if kind != other.kind and np.shares_memory(mine, theirs):
                self.watch.violations.append(
                    Violation("no-aliasing", self.Get_rank(), "a send and a receive over the same bytes", caller())
                )
                return

    # -- buffers ------------------------------------------------------------------------------------------
    def Isend(self, buf: Any, dest: int, tag: int = 0, _call: str = "Isend") -> Req:
        self._aliasing(buf, "send")
        return Req(self.watch, self.comm.Issend(_raw(buf), dest, tag), _call, buf, peer=dest)

    Issend = Isend

    def Irecv(self, buf: Any, source: int = -2, tag: int = -1, _call: str = "Irecv") -> Req:
        self._aliasing(buf, "recv")
        return Req(self.watch, self.comm.Irecv(_raw(buf), source, tag), _call, buf, kind="recv", peer=source)

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        request = self.Isend(buf, dest, tag, _call="Send")
        self.watch.poll(request._test, f"Send(dest={dest}, tag={tag})")

    Ssend = Send

    def Recv(self, buf: Any, source: int = -2, tag: int = -1, status: Any = None) -> None:
        request = self.Irecv(buf, source, tag, _call="Recv")
        self.watch.poll(lambda: request._test(status), f"Recv(source={_peer(source)}, tag={_tag(tag)})")

    def _complete(self, recv: Req, send: Req, status: Any) -> None:
        """Sendrecv's pair (communicators.NonblockingSendrecv posts it), waited on by polling."""
        call = f"Sendrecv(dest={send.peer}, source={_peer(recv.peer)})"
        self.watch.poll(lambda: recv._test(status) & send._test(), call)

    def Sendrecv_replace(self, buf: Any, dest: int, sendtag: int = 0, source: int = -2, recvtag: int = -1,
                         status: Any = None) -> None:  # fmt: skip
        data = _array(buf)
        self.Sendrecv(buf if data is None else data.copy(), dest, sendtag, buf, source, recvtag, status)

    # -- objects ------------------------------------------------------------------------------------------
    def isend(self, obj: Any, dest: int, tag: int = 0) -> Req:
        return Req(self.watch, self.comm.issend(obj, dest, tag), "isend")

    issend = isend

    def irecv(self, buf: Any = None, source: int = -2, tag: int = -1) -> Req:
        def receive() -> tuple[Any] | None:
            message = self.comm.improbe(source, tag)
            return None if message is None else (message.recv(),)

        return Req(self.watch, None, "irecv", recv=receive, kind="recv", peer=source)

    def send(self, obj: Any, dest: int, tag: int = 0) -> None:
        self.isend(obj, dest, tag).Wait()

    ssend = send

    def recv(self, buf: Any = None, source: int = -2, tag: int = -1, status: Any = None) -> Any:
        request = self.irecv(buf, source, tag)
        self.watch.poll(request._test, f"recv(source={_peer(source)}, tag={_tag(tag)})")
        return request.obj

    def sendrecv(self, sendobj: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = -2,
                 recvtag: int = -1, status: Any = None) -> Any:  # fmt: skip
        send = self.isend(sendobj, dest, sendtag)
        got = self.recv(None, source, recvtag, status)
        send.Wait()
        return got

    # -- the rest that waits --------------------------------------------------------------------------------
    def Probe(self, source: int = -2, tag: int = -1, status: Any = None) -> bool:
        self.watch.poll(lambda: self.comm.Iprobe(source, tag, status), f"Probe(source={source}, tag={tag})")
        return True

    probe = Probe

    def Barrier(self) -> None:
        request = self.comm.Ibarrier()
        self.watch.poll(request.Test, "Barrier()")

    barrier = Barrier

    def Split(self, color: int = 0, key: int = 0) -> WatchedComm:
        return WatchedComm(self.comm.Split(color, key), self.watch)

    def Dup(self) -> WatchedComm:
        return WatchedComm(self.comm.Dup(), self.watch)

    Clone = Dup


def SyncComm(comm: Any, timeout: float = 60.0) -> WatchedComm:  # noqa: N802  (the former class's name)
    """A watched communicator over ``comm`` with a control communicator of its own (for tests and tools)."""
    return WatchedComm(comm, Watch(comm.Dup(), timeout))


def namespace(world: WatchedComm) -> types.ModuleType:
    """``mpi4py`` for the user's module under --mpi: the real MPI, but Request and COMM_WORLD watched."""
    from mpi4py import MPI

    class Watched(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            return getattr(MPI, name)

    space = Watched("mpi4py.MPI")
    space.Request, space.COMM_WORLD = Req, world  # type: ignore[attr-defined]
    package = types.ModuleType("mpi4py")
    package.MPI, package.rc = space, sys.modules["mpi4py"].rc  # type: ignore[attr-defined]
    package.__path__ = []
    return package


def draw_cases(
    collective: str, p: int, examples: int, seed: int, inplace: bool, domain: Domain | None = None
) -> list[Case]:
    """The edge cases at this p, then ``examples`` cases drawn as ``check`` draws them, alike on every rank."""
    rng, domain = np.random.default_rng([seed, p]), domain or Domain.of(collective, inplace=inplace)
    dtype = "float64" if "float64" in domain.dtypes else domain.dtypes[0]
    op = ("sum" if "sum" in ops_for(dtype, domain.ops) else ops_for(dtype, domain.ops)[0]) if domain.reduces else None
    first = [Case(collective, p, max(n, domain.least_n(p)), dtype, op, inplace=inplace) for n in (0, 1)]
    return first + [draw(rng, domain, p=p) for _ in range(examples)]


class Runner:
    """Runs cases of one function on this rank of MPI.COMM_WORLD; the ranks agree on every verdict."""

    def __init__(self, fn: Any, world: Any, timeout: float, roles: tuple[str, ...] | None = None):
        from mpi4py import MPI

        self.world, self.timeout, self.roles = world, timeout, roles
        self.world.Set_errhandler(MPI.ERRORS_RETURN)
        self.watch = Watch(world.Dup(), timeout)
        self.watched_world = WatchedComm(world, self.watch)
        self.fn = ModuleCopies(fn).load_with(namespace(self.watched_world))
        self.count = 0
        self.stuck = threading.Event()

    def run(self, case: Case) -> Outcome:
        """This rank's part of one case: its group's inputs, fn twice on the split communicator, the
        properties this rank can see."""
        from mpi4py import MPI

        self.count += 1
        spec, w = COLLECTIVES[case.collective], self.world.Get_rank()
        group = next(g for g in groups(case.p, case.layout) if w in g)
        mine = group.index(w)
        again = case.with_(seed=case.seed + 1)
        arrays = [spec.make(case, len(group), r, v) for r, v in enumerate(group)]  # any rank's input, from the seed
        arrays2 = [spec.make(again, len(group), r, v) for r, v in enumerate(group)]
        out = Outcome(case, inputs=[{} for _ in range(case.p)], results=[None] * case.p, expected=[None] * case.p)
        for r, v in enumerate(group):
            out.inputs[v] = {k: (a.copy() if isinstance(a, np.ndarray) else a) for k, a in arrays[r].items()}
        out.expected[w] = spec.expect(case, [out.inputs[v] for v in group], mine)
        expected2 = spec.expect(again, arrays2, mine)
        color, key = (0, w) if case.layout == "world" else split_args(case.p, case.layout, w)
        sub = self.world.Split(color, key)
        sub.Set_errhandler(MPI.ERRORS_RETURN)
        watched = WatchedComm(sub, self.watch)
        f = OPS[case.op] if case.op else None
        self.watch.start(self.count)
        last_resort = threading.Timer(2 * self.timeout + 5, self._stuck, (case, w))
        last_resort.daemon = True
        last_resort.start()
        left: list[Req] = []
        try:
            first = self._call(spec, watched, arrays[mine], case, len(group), mine, f)
            left = list(self.watch.open)
            kept = first.copy() if isinstance(first, np.ndarray) else first
            second = self._call(spec, watched, {k: (a.copy() if isinstance(a, np.ndarray) else a)
                                                for k, a in arrays2[mine].items()}, again, len(group), mine, f)  # fmt: skip
        except BaseException as exc:  # noqa: BLE001  (the user's code may raise anything: it is the finding)
            prop, text = _classify(exc, w)
            out.failures.append((prop, text))
            out.waited_on_peer = isinstance(exc, PeerFailed)  # type: ignore[attr-defined]
            if not isinstance(exc, (PeerFailed, Hung)):
                self.watch.tell_others(text.split(": ", 1)[-1][:400])
        else:
            out.results[w] = kept
            full: list[dict] = [{} for _ in range(case.p)]
            full[w] = arrays[mine]
            _check(out, full, [[w]], None, live=[first if v == w else None for v in range(case.p)], roles=self.roles)
            if spec.same_bits and isinstance(out.results[w], np.ndarray):
                _same_bits_across(out, sub, w)
            _against_mpi(out, sub, out.inputs[w], w)
            if expected2 is not None and (
                _shape_problem(second, expected2.value) or wrong(second, expected2, case.op).any()
            ):
                out.failures.append(("repeatable", f"a second call (seed {again.seed}) is wrong on rank {w}"))
            out.checked += ["shape-dtype", "inputs-untouched", "result"] + ["same-bits"] * spec.same_bits
            out.checked.append("repeatable")
        finally:
            last_resort.cancel()
        returned = not out.failures or out.failures[0][0] not in ("completes", "truncation")
        left = (left or self.watch.open) if returned else []
        for req in left:  # a send never waited: its buffer must still hold what it sent
            if req.sent is not None and req.buf is not None and not np.array_equal(req.sent, req.buf):
                req._finished()
        found = {
            v.property: str(v) if str(v).startswith("rank") else f"rank {w}: {v}" for v in self.watch.violations[::-1]
        }
        if left:
            found["request-completed"] = (
                f"rank {w} returned with a request never completed: {left[0].call} from {left[0].where}"
            )
        out.failures += [(p, found[p]) for p in MPI_ERRORS if p in found]
        out.failures.sort(key=lambda failure: _order(failure[0]))
        out.checked[1:1] = [p for p in MPI_ERRORS if p not in out.checked]
        sub.Free()
        return out

    def _call(self, spec: Any, comm: WatchedComm, a: dict, case: Case, q: int, r: int, f: Any) -> Any:
        from mpi4py import MPI

        self.watch.open = []
        mpi_op = getattr(MPI, case.op.upper(), None) if case.op else None
        fn = signature_roles.adapt(self.fn, self.roles, case, q, r, mpi_op) if self.roles else self.fn
        result = spec.call(fn, comm, a, case, q, r, f)
        return result

    def verdict(self, out: Outcome) -> int:
        """The first broken property's index in PROPERTIES, agreed by every rank (the smallest); -1: all held."""
        from mpi4py import MPI

        mine = PROPERTIES.index(out.failures[0][0]) if out.failures and out.failures[0][0] in PROPERTIES else 99
        if out.failures and mine == 99:
            mine = PROPERTIES.index("result")  # the MPI oracle's disagreement
        if getattr(out, "waited_on_peer", False) and len(out.failures) == 1:
            mine = 98  # this rank only gave up waiting: the peer's failure names the property
        flag = np.array([mine], np.int64)
        self.world.Allreduce(MPI.IN_PLACE, flag, op=MPI.MIN)
        return -1 if flag[0] == 99 else (0 if flag[0] == 98 else int(flag[0]))

    def _stuck(self, case: Case, w: int) -> None:
        sys.stderr.write(  # one write, so that the ranks' lines do not interleave
            f"collectives.check: rank {w}: {case}: property 'completes' failed: no return after "
            f"{2 * self.timeout + 5:g} s outside any call the kit watches (an endless loop, or an MPI call "
            f"such as a collective; last watched: {self.watch.current})\n"
        )
        sys.stderr.flush()
        os._exit(1)  # mpiexec then ends the job on every rank


def _classify(exc: BaseException, w: int) -> tuple[str, str]:
    """(property, text) of what a rank's call raised."""
    from mpi4py import MPI

    if isinstance(exc, (Hung, PeerFailed)):
        return "completes", f"rank {w}: {exc}"
    if isinstance(exc, MPI.Exception) and exc.Get_error_class() == MPI.ERR_TRUNCATE:
        return "truncation", f"rank {w}: {_raised(exc)}"
    return "completes", f"rank {w}: {_raised(exc)}"


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


def check_mpi(fn: Any, args: Any) -> int:
    """Run the cases on MPI.COMM_WORLD; 0 if every property holds, 1 with the shrunk report on rank 0."""
    from mpi4py import MPI

    world = MPI.COMM_WORLD
    fresh = int(np.random.SeedSequence().entropy) % 2**31  # type: ignore[arg-type]
    seed = np.array([args.seed if args.seed is not None else fresh], np.int64)
    world.Bcast(seed, root=0)
    p, rank = world.Get_size(), world.Get_rank()
    roles = getattr(args, "roles", None)
    domain = _domain(args, roles)
    runner = Runner(fn, world, args.timeout, roles)
    cases = draw_cases(args.collective, p, args.examples, int(seed[0]), args.inplace, domain)
    for case in cases:
        broken = runner.verdict(runner.run(case))
        if broken >= 0:
            return _report(fn, runner, case, broken, domain, args, int(seed[0]))
    if rank == 0:
        print(
            f"{args.target}: {args.collective}: every property held on {len(cases)} cases at p = {p} under MPI; "
            f"{domain.contract()}; {untried(p)}"
        )
    return 0


def _domain(args: Any, roles: tuple[str, ...] | None) -> Domain:
    ops = getattr(args, "ops", None)
    if not signature_roles.contract_ops(roles) and COLLECTIVES[args.collective].reduces:
        ops = [(ops or ["sum"])[0]]
    return Domain.of(
        args.collective, getattr(args, "dtypes", None), ops, None, True, args.inplace,
        1, getattr(args, "min_n", 0), rooted=roles is None or "root" in roles,
    )  # fmt: skip


def untried(p: int) -> str:
    """What this run could not try: every p but the job's."""
    other = "odd p" if p % 2 == 0 else "even p"
    return f"this run tried p = {p} only ({other} untested): run again at other -n, or without --mpi for p = 1..16"


def _report(fn: Any, runner: Runner, case: Case, broken: int, domain: Domain, args: Any, seed: int) -> int:
    """Confirm the failure, shrink it at this p (keeping the same first property), print rank 0's report."""
    w = runner.world.Get_rank()
    again = sum(runner.verdict(runner.run(case)) == broken for _ in range(REPEATS - 1)) + 1
    notes = [f"found at search seed {seed} ({case})"]
    if again < REPEATS:
        notes.append(f"intermittent: '{PROPERTIES[broken]}' failed in {again} of {REPEATS} runs of this case")
        small = case
    else:
        small = shrink(case, lambda c: runner.verdict(runner.run(c)) == broken, domain, shrink_p=False)
        notes[0] += ", then shrunk"
    out = runner.run(small)
    runner.verdict(out)
    text = "" if out.ok else "\n".join(f"  {prop}: {what}" for prop, what in out.failures)
    if out.expected[w] is not None and out.results[w] is not None and "result" in (p for p, _ in out.failures):
        text += f"\n  rank {w}: expected {out.expected[w].value!r}\n  rank {w}: got      {out.results[w]!r}"
    lines = _gather_text(text, runner.world)
    if w == 0:
        name = getattr(fn, "__qualname__", fn)
        print(f"{name} breaks '{PROPERTIES[broken]}' under MPI at p = {case.p}; smallest failing case: {small}")
        shown = "\n".join(line for line in lines if line).splitlines()
        key = f"  {PROPERTIES[broken]}:"
        print("\n".join(sorted(shown, key=lambda line: not line.startswith(key))))  # the agreed property first
        print("\n".join(notes))
        print(f"{domain.contract().capitalize()} was judged; {untried(case.p)}")
        _in_process(fn, small, args, runner.roles)
    return 1


def _in_process(fn: Any, case: Case, args: Any, roles: tuple[str, ...] | None) -> None:
    """The same case on in-process ranks: its report, or its messages step by step where it passes there."""
    from collectives.inprocess import NotOffered
    from collectives.kit.run import run_case

    try:
        local = run_case(fn, case, signature=roles, timeout=min(args.timeout, 10.0))
    except NotOffered as exc:
        print(f"(not run on in-process ranks: {exc})")
        return
    if not local.ok:
        report = str(describe_failure(fn, local, args.diagram, roles=roles))
        print("the same case on in-process ranks:\n" + report.split("\n", 1)[1])
    else:
        print("the same case passes on in-process ranks; its messages, step by step:")
        print("\n".join("  " + row for row in step_table(fn, case, roles=roles)[0]))


def _gather_text(text: str, world: Any) -> list[str]:
    data = np.frombuffer(text.encode(), np.uint8)
    counts = np.zeros(world.Get_size(), np.int64)
    world.Allgather(np.array([data.size], np.int64), counts)
    buf = np.empty(int(counts.sum()), np.uint8)
    world.Allgatherv(data, [buf, counts])
    offsets = np.concatenate([[0], np.cumsum(counts)])
    return [bytes(buf[offsets[i] : offsets[i + 1]]).decode() for i in range(world.Get_size())]


__all__ = ["Req", "Runner", "SyncComm", "Watch", "WatchedComm", "check_mpi", "draw_cases", "untried"]
