"""The property-test kit on the real communicator (collectives.check --mpi), at every P the suite runs."""

import io
import zlib
from contextlib import redirect_stdout

import numpy as np
from mpi4py import MPI

import collectives
from collectives.check import parse
from collectives.kit.mpi import SyncComm, check_mpi, draw_cases


def test_cases_are_drawn_alike_on_every_rank():
    cases = draw_cases("allreduce", MPI.COMM_WORLD.Get_size(), 20, seed=5, inplace=False)
    mine = np.array([zlib.crc32(str(c).encode()) for c in cases], np.int64)
    first = mine.copy()
    MPI.COMM_WORLD.Bcast(first, root=0)
    assert np.array_equal(mine, first) and {c.n for c in cases[:2]} == {0, 1}


def test_a_correct_ring_passes_and_a_wrong_one_fails_on_every_rank():
    args = parse(["x.py:f", "--examples", "12", "--seed", "3"])
    with redirect_stdout(io.StringIO()):
        assert check_mpi(collectives.ring.allreduce, args) == 0

    def off_by_one(comm, x, f):  # right on rank 0 only
        out = collectives.ring.allreduce(comm, x, f)
        if comm.Get_rank() > 0 and out.size:
            out[-1] = out[0]
        return out

    text = io.StringIO()
    with redirect_stdout(text):
        verdict = check_mpi(off_by_one, args)
    p = MPI.COMM_WORLD.Get_size()
    assert verdict == 1  # every rank agrees on the verdict
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert f"breaks 'result' under MPI at p = {p}" in text.getvalue() and "n=2" in text.getvalue()


def test_sends_are_synchronous():
    comm = SyncComm(MPI.COMM_WORLD)
    rank, p = comm.Get_rank(), comm.Get_size()
    x, got = np.arange(3.0) + rank, np.empty(3)
    req = comm.Isend(x, (rank + 1) % p, 7)  # an Issend: done only once matched
    comm.Recv(got, (rank - 1) % p, 7)
    req.Wait()
    assert got[0] == (rank - 1) % p and comm.current.startswith("nothing")


def blocking_ring(comm, x, f):
    """Every rank Sends before it Receives: a deadlock under synchronous sends, at every p > 1."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, tmp = x.copy(), np.empty_like(x)
    for _ in range(p - 1):
        comm.Send(acc, (rank + 1) % p, 0)
        comm.Recv(tmp, (rank - 1) % p, 0)
        f(acc, tmp, out=acc)
    return acc


def raises_on_rank_one(comm, x, f):
    """Rank 1 raises; the others wait for its message and must name its error, not hang."""
    if comm.Get_rank() == 1:
        raise ValueError("student bug on rank 1")
    if comm.Get_size() > 1:
        comm.Recv(np.empty_like(x), 1, 0)
    return x.copy()


def never_waits(comm, x, f):
    """The ring with Isend requests never completed."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, tmp = x.copy(), np.empty_like(x)
    for _ in range(p - 1):
        comm.Isend(acc.copy(), (rank + 1) % p, 0)
        comm.Recv(tmp, (rank - 1) % p, 0)
        f(acc, tmp, out=acc)
    return acc


def _verdict(fn, *extra):
    args = parse(["x.py:f", "--examples", "3", "--seed", "1", "--timeout", "2", "--diagram", "", *extra])
    text = io.StringIO()
    with redirect_stdout(text):
        verdict = check_mpi(fn, args)
    return verdict, text.getvalue()


def test_a_deadlock_ends_in_a_shrunk_report_not_an_aborted_job():
    verdict, text = _verdict(blocking_ring)
    p = MPI.COMM_WORLD.Get_size()
    assert verdict == 1
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert f"breaks 'completes' under MPI at p = {p}" in text and "blocked in Send(dest=" in text
        assert "smallest failing case: allreduce: p=" in text and "n=0" in text  # shrunk at this p
        assert f"this run tried p = {p} only" in text


def test_a_rank_waiting_on_a_peer_that_raised_names_the_peers_error():
    verdict, text = _verdict(raises_on_rank_one)
    assert verdict == 1
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert "student bug on rank 1" in text and "when rank 1 failed" in text, text


def test_requests_never_completed_are_named_under_mpi():
    verdict, text = _verdict(never_waits)
    assert verdict == 1
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert "breaks 'request-completed'" in text and "test_kit_mpi.py:" in text, text


def float32_into_float64(comm, x, f):
    """Sends float32, receives float64: MPICH asserts on the unpack and aborts the job (no report)."""
    rank, p = comm.Get_rank(), comm.Get_size()
    acc, tmp = x.copy(), np.empty_like(x)
    for _ in range(p - 1):
        comm.Sendrecv([x.astype(np.float32), MPI.FLOAT], (rank + 1) % p, 0, [tmp, MPI.DOUBLE], (rank - 1) % p, 0)
        f(acc, tmp, out=acc)
    return acc


def test_a_type_mismatch_is_a_verdict_not_an_aborted_job():
    verdict, text = _verdict(float32_into_float64, "--dtypes", "float64", "--ops", "sum")
    assert verdict == 1
    if MPI.COMM_WORLD.Get_rank() == 0:
        assert "breaks 'truncation'" in text and "the types of the send and the receive differ" in text, text
