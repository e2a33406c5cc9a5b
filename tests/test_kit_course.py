"""The kit judges code written for a course (issue 31): mpi4py's surface on the in-process ranks, each rank's own
module, a course's signature and contract, the errors MPI itself catches, and every way out of a call."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import collectives
from collectives.inprocess import NotOffered, Status
from collectives.kit import roles
from collectives.kit.search import Domain, draw
from collectives.testing import PropertyFailure, check, pair_cases

ROOT = Path(__file__).resolve().parents[1]
SCRATCH: list[int] = []


def student(tmp_path: Path, name: str, body: str) -> Path:
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(body))
    return path


def run_check(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, OMP_NUM_THREADS="1")
    return subprocess.run(
        [sys.executable, "-m", "collectives.check", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=300,
    )


def load(path: Path, name: str):  # noqa: ANN201
    from collectives.check import load_function

    return load_function(f"{path}:{name}")


# -- mpi4py's surface on the in-process ranks -----------------------------------------------------------------
def test_lower_case_objects_probe_waitany_specs_and_proc_null():
    def fn(comm):
        rank = comm.rank
        if rank == 0:
            status = Status()
            comm.Probe(source=1, tag=4, status=status)
            got = np.empty(status.Get_count() // 8)
            comm.Recv([got, np.float64], source=1, tag=4)  # [buf, datatype]
            obj = comm.recv(source=1, tag=5)
            reqs = [comm.irecv(source=1, tag=6)]
            i, late = collectives.inprocess.Request.waitany(reqs)
            comm.Send(np.zeros(1), collectives.inprocess.PROC_NULL)  # completes at once, moves nothing
            comm.barrier()
            return got.tolist(), obj, (i, late)
        if rank == 1:
            comm.Send([np.arange(4.0), 3, np.float64], dest=0, tag=4)  # [buf, count, datatype]: 3 elements
            payload = {"a": np.ones(2)}
            comm.send(payload, dest=0, tag=5)
            payload["a"][:] = 7  # the receiver's copy was taken at the send
            comm.isend("late", dest=0, tag=6).wait()
        comm.barrier()
        return None

    got, obj, (i, late) = collectives.simulate(3, fn)[0]
    assert got == [0.0, 1.0, 2.0] and obj["a"].tolist() == [1.0, 1.0] and (i, late) == (0, "late")


def test_a_name_the_ranks_lack_is_not_offered_and_a_misspelt_one_is_an_attribute_error():
    with pytest.raises(NotOffered, match=r"your code calls comm.Alltoallw, which the in-process ranks do not offer"):
        collectives.simulate(2, lambda comm: comm.Alltoallw(None, None))
    with pytest.raises(AttributeError, match="no attribute 'Sned'") as info:
        collectives.simulate(1, lambda comm: comm.Sned(np.zeros(1), 0))
    assert not isinstance(info.value, NotOffered)


def test_not_offered_is_a_usage_error_in_one_line(tmp_path):
    path = student(
        tmp_path,
        "hw",
        """
        def allreduce(send, recv, comm, op):
            comm.Allreduce(send, recv)
        """,
    )
    out = run_check(f"{path}:allreduce", "--signature", "send,recv,comm,op", "--examples", "2")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.strip().splitlines() == [
        "collectives.check: your code calls comm.Allreduce, which the in-process ranks do not offer; "
        "check it under mpiexec with --mpi"
    ]


COURSE_RING = """
    import mpi4py
    mpi4py.rc(initialize=False, finalize=False)
    from mpi4py import MPI
    import numpy as np

    calls = 0          # a per-process call counter, used as a tag
    scratch = None     # a module-level scratch buffer, sized on first use

    def allreduce(send, recv, comm, op):
        global calls, scratch
        calls += 1
        rank, size = comm.rank, comm.size
        b = np.linspace(0, send.size, size + 1).astype(int)
        recv[:] = send
        if scratch is None or scratch.size < send.size:
            scratch = np.empty(send.size)
        for step in range(size - 1):
            s, r = (rank - step) % size, (rank - step - 1) % size
            req = comm.Isend(recv[b[s]:b[s + 1]].copy(), (rank + 1) % size, calls)
            comm.Recv(scratch[: b[r + 1] - b[r]], (rank - 1) % size, calls)
            req.wait()
            recv[b[r]:b[r + 1]] = op(recv[b[r]:b[r + 1]], scratch[: b[r + 1] - b[r]])
        for step in range(size - 1):
            s, r = (rank - step + 1) % size, (rank - step) % size
            reqs = [comm.Isend(recv[b[s]:b[s + 1]].copy(), (rank + 1) % size, calls),
                    comm.Irecv(scratch[: b[r + 1] - b[r]], (rank - 1) % size, calls)]
            MPI.Request.Waitall(reqs)
            recv[b[r]:b[r + 1]] = scratch[: b[r + 1] - b[r]]
        comm.barrier()
"""


def test_a_course_file_with_module_state_and_mpi4py_idioms_passes(tmp_path):
    """A call counter as the tag, a module-level scratch buffer, mpi4py.rc, MPI.Request.Waitall, req.wait(),
    comm.barrier(), comm.rank: correct under mpiexec, where each rank is a process with its own globals."""
    path = student(tmp_path, "hw3", COURSE_RING)
    report = check(load(path, "allreduce"), signature="send,recv,comm,op", dtypes=["float64"], ops=["sum"], examples=25)
    assert "dtypes float64; ops sum" in str(report) and report.note == ""


def test_a_function_defined_inside_another_runs_on_copies_of_its_globals_and_says_so():
    def make():
        def allreduce(comm, x, f):
            SCRATCH.append(x.size)  # a module-level list: shared by the threads
            return collectives.ring.allreduce(comm, x, f)

        return allreduce

    report = check(make(), examples=2)
    assert "not at the top level of a file" in report.note and "SCRATCH" in report.note


# -- the errors MPI itself catches or suffers, each at the student's line ---------------------------------------
ERRORS = {
    "truncation": """
        import numpy as np
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            recv[:] = send
            tmp = np.empty(max(send.size - 1, 0))
            for _ in range(size - 1):
                comm.Sendrecv(recv, (rank + 1) % size, 0, tmp, (rank - 1) % size, 0)
        """,
    "truncation-by-type": """
        import numpy as np
        from mpi4py import MPI
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            recv[:] = send
            tmp = np.empty_like(send)
            for _ in range(size - 1):  # float32 sent, float64 received: MPICH asserts and aborts the job
                comm.Sendrecv([send.astype(np.float32), MPI.FLOAT], (rank + 1) % size, 0,
                              [tmp, MPI.DOUBLE], (rank - 1) % size, 0)
                recv[:] = op(recv, tmp)
        """,
    "no-aliasing": """
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            moving = send.copy()
            recv[:] = send
            for _ in range(size - 1):
                comm.Sendrecv(moving, (rank + 1) % size, 0, moving, (rank - 1) % size, 0)
                recv[:] = op(recv, moving)
        """,
    "request-completed": """
        import numpy as np
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            recv[:] = send
            for _ in range(size - 1):
                incoming = np.empty_like(send)
                comm.Isend(recv.copy(), (rank + 1) % size, 0)
                comm.Recv(incoming, (rank - 1) % size, 0)
                recv[:] = op(send, incoming) if False else recv
        """,
    "send-buffer-untouched": """
        import numpy as np
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            recv[:] = send
            moving, incoming = send.copy(), np.empty_like(send)
            for _ in range(size - 1):
                req = comm.Isend(moving, (rank + 1) % size, 0)
                comm.Recv(incoming, (rank - 1) % size, 0)
                moving[:] = incoming
                req.Wait()
                recv[:] = op(recv, incoming)
        """,
}


@pytest.mark.parametrize("prop", list(ERRORS))
def test_each_mpi_error_is_named_at_the_students_line(tmp_path, prop):
    path = student(tmp_path, "hw", ERRORS[prop])
    with pytest.raises(PropertyFailure) as info:
        check(load(path, "allreduce"), signature="send,recv,comm,op", dtypes=["float64"], ops=["sum"], diagram="")
    failure = info.value
    prop = prop.removesuffix("-by-type")
    assert failure.property == prop, str(failure)
    first = str(failure).splitlines()[1]
    assert first.startswith(f"  {prop}:") and f"{path}:" in first and "collectives/" not in first, first


def test_receiving_into_another_slice_of_the_array_one_sends_from_is_legal():
    def fn(comm):
        rank, size = comm.Get_rank(), comm.Get_size()
        buf = np.arange(4.0) + rank
        comm.Sendrecv(buf[:2], (rank + 1) % size, 0, buf[2:], (rank - 1) % size, 0)
        return buf

    res = collectives.simulate(2, fn)
    assert res.violations == [] and res[0].tolist() == [0.0, 1.0, 1.0, 2.0]


# -- ways out of a call ------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("line", "words"),
    [
        ("sys.exit(0)", "called sys.exit(0)"),
        ("sys.exit(3)", "called sys.exit(3)"),
        ("os._exit(0)", "called os._exit(0)"),
        ("raise KeyboardInterrupt", "KeyboardInterrupt"),
    ],
)
def test_every_way_out_of_the_function_is_a_verdict(tmp_path, line, words):
    path = student(
        tmp_path,
        "quits",
        f"""
        import os, sys
        def allreduce(comm, x, f):
            if comm.Get_size() == 2:
                {line}
            return x.copy()
        """,
    )
    out = run_check(f"{path}:allreduce", "--examples", "3", "--diagram", "")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "breaks 'completes'" in out.stdout and words in out.stdout and f"{path}:" in out.stdout


# -- a course's signature and contract -----------------------------------------------------------------------------
def test_signature_roles_are_checked_against_the_collective():
    assert roles.parse("send,recv,comm,op", "allreduce") == ("x", "recv", "comm", "op")
    assert roles.parse("sendbuf,recvbuf,comm,root,mpiop", "reduce") == ("x", "recv", "comm", "root", "mpiop")
    for text, words in [
        ("send,recv,comm,op,bogus", "unknown role 'bogus'"),
        ("send,send,comm", "given twice"),
        ("send,recv,comm,f,op", "given twice"),
        ("send,recv,op", "needs a 'comm' role"),
        ("send,comm,root", "allreduce has no 'root'"),
        ("send,comm,op", "broadcast has no 'op'"),
    ]:
        collective = "broadcast" if "broadcast" in words else "allreduce"
        with pytest.raises(ValueError, match=words):
            roles.parse(text, collective)


def test_the_course_contract_passes_what_the_full_contract_fails(tmp_path):
    """Written for float64 sums with n >= p (a common homework promise): wrong at n < p, which the course
    never asks. The full contract fails it, and says which contract it judged; the course's passes it."""
    path = student(
        tmp_path,
        "hw",
        """
        import numpy as np
        def allreduce(send, recv, comm, op):
            rank, size = comm.Get_rank(), comm.Get_size()
            if send.size < size:                        # the course promises n >= p
                raise ValueError("n must be at least p")
            if rank == 0:                               # gather to rank 0, sum in rank order, send back
                recv[:] = send
                tmp = np.empty_like(send)
                for src in range(1, size):
                    comm.Recv(tmp, src, 0)
                    recv[:] = op(recv, tmp)
                for dst in range(1, size):
                    comm.Send(recv, dst, 1)
            else:
                comm.Send(send, 0, 0)
                comm.Recv(recv, 0, 1)
        """,
    )
    full = run_check(f"{path}:allreduce", "--signature", "send,recv,comm,op", "--examples", "10", "--diagram", "")
    assert full.returncode == 1 and "The full contract was judged." in full.stdout
    course = ["--dtypes", "float64", "--ops", "sum", "--min-n", "p"]
    ok = run_check(f"{path}:allreduce", "--signature", "send,recv,comm,op", *course, "--examples", "20")
    assert ok.returncode == 0 and "the contract dtypes float64; ops sum; n >= p" in ok.stdout, ok.stdout + ok.stderr


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (["--signature", "send,recv,comm,oops"], "--signature: unknown role 'oops'"),
        (["--dtypes", "float65"], "--dtypes: unknown dtype 'float65'"),
        (["--ops", "avg"], "--ops: unknown op 'avg'"),
        (["--min-n", "lots"], "--min-n lots"),
        (["--min-ranks", "0"], "--min-ranks 0"),
    ],
)
def test_contract_options_give_one_usage_line(tmp_path, args, words):
    path = student(tmp_path, "hw", "def allreduce(comm, x, f):\n    return x.copy()\n")
    out = run_check(f"{path}:allreduce", *args)
    assert out.returncode == 2 and words in out.stderr and "Traceback" not in out.stderr, out.stderr


def test_recv_role_reads_the_verdict_from_recv_and_ignores_the_return(tmp_path):
    path = student(
        tmp_path,
        "hw",
        """
        def allreduce(send, recv, comm, op):
            out = send.copy()                 # right on one rank, and returned: but recv is never written
            return out
        """,
    )
    with pytest.raises(PropertyFailure) as info:
        check(load(path, "allreduce"), signature="send,recv,comm,op", dtypes=["float64"], ops=["sum"], diagram="")
    assert info.value.property == "result" and info.value.case.p >= 1


def test_a_reduce_off_the_root_returns_none(tmp_path):
    from kit_bugs.mpi_bugs import reduce_partial_off_root

    with pytest.raises(PropertyFailure) as info:
        check(reduce_partial_off_root, "reduce", diagram="")
    assert info.value.property == "result" and "is not the root but gave a result" in str(info.value)


# -- the search: every pair once, p past 16, n past 512 KiB ------------------------------------------------------
def test_every_dtype_op_pair_is_tried_before_the_drawn_cases():
    domain = Domain.of("allreduce")
    pairs = {(c.dtype, c.op) for c in pair_cases(domain)}
    assert ("int8", "bxor") in pairs and ("pair:int32", "minloc") in pairs and ("complex64", "prod") in pairs
    assert len(pairs) == len(pair_cases(domain))


def test_a_bug_in_one_dtype_op_pair_is_caught_on_every_seed():
    def wrong_min_for_uint16(comm, x, f):
        out = collectives.ring.allreduce(comm, x, f)
        if x.dtype == np.uint16 and f is np.minimum and out.size:
            out[0] = out[0] // 2 if out[0] else 1
        return out

    for seed in range(3):
        with pytest.raises(PropertyFailure):
            check(wrong_min_for_uint16, seed=seed, examples=0, diagram="")


def test_p_above_max_ranks_and_n_past_512_kib_are_drawn_now_and_then():
    rng, domain = np.random.default_rng(0), Domain.of("broadcast")
    drawn = [draw(rng, domain, 16, beyond=True) for _ in range(400)]
    assert any(c.p > 16 for c in drawn) and max(c.p for c in drawn) <= 32
    assert any(c.n * np.dtype(c.dtype).itemsize > 512 * 1024 for c in drawn)


def test_a_race_is_reported_as_intermittent_with_how_often_it_failed():
    import threading

    calls = {"n": 0}
    lock = threading.Lock()

    def sometimes(comm, x, f):
        out = collectives.ring.allreduce(comm, x, f)
        with lock:
            calls["n"] += 1
            flaky = calls["n"] % 7 == 3
        if flaky and out.size:
            out[0] += 1
        return out

    with pytest.raises(PropertyFailure) as info:
        check(sometimes, dtypes=["int64"], ops=["sum"], examples=40, diagram="")
    text = str(info.value)
    assert "intermittent:" in text and "of 5 runs" in text


def test_the_diagram_names_a_students_tags_as_tags_not_as_the_packages_phases(tmp_path, monkeypatch):
    """A student's tag-1 messages were drawn as the package's "check" phase (tag 1 is its agreement handshake)."""
    pytest.importorskip("matplotlib")
    from kit_bugs.mpi_bugs import truncated_receive

    import collectives.diagram

    drawn = []
    real = collectives.diagram.spacetime
    monkeypatch.setattr(collectives.diagram, "spacetime", lambda *a, **k: drawn.append(real(*a, **k)))
    with pytest.raises(PropertyFailure):
        check(truncated_receive, diagram=str(tmp_path / "d.png"), examples=0)
    legend = [t.get_text() for t in drawn[-1].axes[0].get_legend().get_texts()]
    assert legend and "check" not in legend and all(x.startswith("tag ") for x in legend), legend
