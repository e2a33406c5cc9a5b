"""The simulated communicator: MPI's matching rules, requests, the message record, and failures reported."""

import time

import numpy as np
import pytest

import collectives
from collectives.inprocess import ANY_SOURCE, ANY_TAG, Request, Status


def test_rank_size_and_results_in_rank_order():
    res = collectives.simulate(5, lambda comm, k: (comm.Get_rank(), comm.Get_size(), comm.rank, k), 7)
    assert list(res) == [(r, 5, r, 7) for r in range(5)]


def test_any_source_any_tag_and_status():
    def fn(comm):
        if comm.Get_rank() == 0:
            got = []
            for _ in range(2):
                buf, status = np.zeros(3), Status()
                comm.Recv(buf, ANY_SOURCE, ANY_TAG, status=status)
                got.append((status.Get_source(), status.Get_tag(), status.Get_count(), buf[0]))
            return sorted(got)
        comm.Send(np.full(3, comm.Get_rank(), dtype=np.float64), 0, tag=10 + comm.Get_rank())

    assert collectives.simulate(3, fn)[0] == [(1, 11, 24, 1.0), (2, 12, 24, 2.0)]


def test_messages_are_non_overtaking_and_matched_by_tag():
    def fn(comm):
        if comm.Get_rank() == 0:
            reqs = [comm.Isend(np.array([i], np.int64), 1, tag=i % 2) for i in range(6)]
            Request.Waitall(reqs)
            return None
        odd, even = np.zeros(3, np.int64), np.zeros(3, np.int64)
        for i in range(3):
            comm.Recv(odd[i : i + 1], 0, tag=1)  # tag 1 first: the tag-0 messages wait, in order
        for i in range(3):
            comm.Recv(even[i : i + 1], 0, tag=0)
        return odd.tolist(), even.tolist()

    assert collectives.simulate(2, fn)[1] == ([1, 3, 5], [0, 2, 4])


def test_nonblocking_requests_test_and_wait():
    def fn(comm):
        other = 1 - comm.Get_rank()
        buf = np.zeros(4)
        recv = comm.Irecv(buf, other, 3)
        done_before = recv.Test() if comm.Get_rank() == 0 else None
        send = comm.Isend(np.full(4, comm.Get_rank() + 1.0), other, 3)
        recv.Wait()
        send.Wait()
        return buf.tolist(), done_before

    res = collectives.simulate(2, fn)
    assert res[0] == ([2.0] * 4, False) and res[1][0] == [1.0] * 4


def test_sendrecv_ring_and_barrier():
    def fn(comm):
        r, p = comm.Get_rank(), comm.Get_size()
        out = np.zeros(1)
        comm.Sendrecv(np.array([float(r)]), (r + 1) % p, 0, out, (r - 1) % p, 0)
        comm.Barrier()
        return out[0]

    res = collectives.simulate(7, fn)
    assert list(res) == [float((r - 1) % 7) for r in range(7)]
    assert len(res.messages) == 7  # the barrier's messages are in their own context, not recorded


def test_dup_gives_a_separate_context():
    def fn(comm):
        other = comm.Dup()
        if comm.Get_rank() == 0:
            Request.Waitall([other.Isend(np.array([1.0]), 1, 0), comm.Isend(np.array([2.0]), 1, 0)])
            return None
        a, b = np.zeros(1), np.zeros(1)
        comm.Recv(a, 0, 0)  # matches the message on comm, not the earlier one on the dup
        other.Recv(b, 0, 0)
        return a[0], b[0]

    assert collectives.simulate(2, fn)[1] == (2.0, 1.0)


def test_message_record_steps_and_arrivals():
    def fn(comm):
        if comm.Get_rank() == 0:
            comm.Send(np.zeros(2), 1, 5)
            comm.Send(np.zeros(3), 1, 6)
        else:
            comm.Recv(np.zeros(3), 0, 6)  # posted first, but tag 6 is sent second: Ssend semantics
            comm.Recv(np.zeros(2), 0, 5)

    with pytest.raises(collectives.DeadlockError, match=r"rank 0 .*Send\(dest=1, tag=5"):
        collectives.simulate(2, fn)

    def ok(comm):
        if comm.Get_rank() == 0:
            comm.Send(np.zeros(2), 1, 5)
            comm.Send(np.zeros(3), 1, 6)
        else:
            comm.Recv(np.zeros(2), 0, 5)
            comm.Recv(np.zeros(3), 0, 6)

    res = collectives.simulate(2, ok)
    assert [(m.step, m.source, m.dest, m.tag, m.nbytes, m.arrival) for m in res.messages] == [
        (0, 0, 1, 5, 16, 1),
        (1, 0, 1, 6, 24, 2),
    ]
    assert res.rounds == 2


def test_deadlock_is_reported_with_what_each_rank_waits_on():
    def fn(comm):
        buf = np.zeros(3)
        comm.Recv(buf, (comm.Get_rank() + 1) % comm.Get_size(), 5)

    t0 = time.perf_counter()
    with pytest.raises(collectives.DeadlockError) as info:
        collectives.simulate(3, fn, timeout=30)
    assert time.perf_counter() - t0 < 5  # found at once, not after the timeout
    for r in range(3):
        assert f"rank {r} (step 0): blocked in Recv(source={(r + 1) % 3}, tag=5" in str(info.value)


def test_waiting_on_a_finished_rank_is_a_deadlock():
    def fn(comm):
        if comm.Get_rank() == 0:
            comm.Recv(np.zeros(1), 1, 0)

    with pytest.raises(collectives.DeadlockError, match="rank 1 .*finished"):
        collectives.simulate(2, fn)


def test_exception_in_one_rank_is_raised_by_simulate():
    def fn(comm):
        if comm.Get_rank() == 2:
            raise KeyError("boom")
        comm.Recv(np.zeros(1), 2, 0)

    with pytest.raises(KeyError, match="boom") as info:
        collectives.simulate(4, fn)
    assert "simulated rank 2 of 4" in info.value.__notes__[0]


def test_a_rank_that_never_blocks_is_stopped_by_the_timeout():
    def fn(comm):
        if comm.Get_rank() == 0:
            req = comm.Irecv(np.zeros(1), 1, 0)
            while not req.Test():
                pass

    with pytest.raises(TimeoutError, match="rank 0 .*running"):
        collectives.simulate(2, fn, timeout=0.3)


def test_bad_calls_raise_clear_errors():
    def trunc(comm):
        if comm.Get_rank() == 0:
            comm.Send(np.zeros(4), 1, 0)
        else:
            comm.Recv(np.zeros(2), 0, 0)

    with pytest.raises(ValueError, match="truncated.*32 bytes.*16 bytes"):
        collectives.simulate(2, trunc)
    with pytest.raises(ValueError, match="out of range"):
        collectives.simulate(2, lambda comm: comm.Send(np.zeros(1), 5, 0))
    with pytest.raises(TypeError, match="not a datatype"):
        collectives.simulate(2, lambda comm: comm.Send([np.zeros(1), "MPI.DOUBLE"], 1 - comm.Get_rank(), 0))
    with pytest.raises(ValueError, match="C-contiguous"):
        collectives.simulate(1, lambda comm: comm.Isend(np.zeros((4, 4))[:, 0], 0, 0))
    with pytest.raises(ValueError, match="nprocs"):
        collectives.simulate(0, lambda comm: None)
