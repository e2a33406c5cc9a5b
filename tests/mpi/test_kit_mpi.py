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
