"""Traces of the real collective code (collectives/virtual_time/trace.py) against the messages of a real simulated run."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
from collectives import cost
from collectives.virtual_time.trace import CHECK_TAGS, TraceComm, calls, check_memory, trace, trace_function

ALLREDUCE = cost.ALGORITHMS
BLOCKS = [name for name in calls() if name not in (*ALLREDUCE, "auto")]


def traced_messages(traces):
    """Per source rank, the (dest, tag, bytes) of every message it sends, in program order."""
    sent = []
    for events in traces:
        sent.append([(e.peer, e.tag, e.nbytes) for e in events if e.call in ("send", "sendrecv", "isend")])
    return sent


def simulated_messages(result, p, keep_check):
    sent = [[] for _ in range(p)]
    for m in result.messages:
        if keep_check or m.tag not in CHECK_TAGS:
            sent[m.source].append((m.dest, m.tag, m.nbytes))
    return sent


def run_for_real(name, comm, x, check):
    """The call that trace() makes, on real data."""
    if name in ALLREDUCE:
        return collectives.allreduce(comm, x, "sum", algorithm=name, check=check)
    block, _, algorithm = name.partition(":")
    if block == "reduce_scatter":
        return collectives.reduce_scatter(comm, x, "sum", algorithm=algorithm or "ring")
    if block in ("allgather", "alltoall"):
        return getattr(collectives, block)(comm, x, algorithm=algorithm or {"allgather": "ring"}.get(block, "auto"))
    if block in ("reduce", "scan", "exscan"):
        return getattr(collectives, block)(comm, x, "sum", **({"root": 0} if block == "reduce" else {}))
    if block == "barrier":
        return collectives.barrier(comm)
    return getattr(collectives, block)(comm, x, root=0)


def real_input(name, p, count, dtype):
    return np.ones((p, count) if name.split(":")[0] in ("scatter", "alltoall") else count, dtype)


@settings(max_examples=80)
@given(
    name=st.sampled_from([*ALLREDUCE, *BLOCKS]),
    p=st.integers(1, 16),
    count=st.integers(0, 300),
    dtype=st.sampled_from([np.float32, np.float64, np.int16]),
    check=st.booleans(),
)
def test_traced_messages_equal_the_simulated_run(name, p, count, dtype, check):
    itemsize = np.dtype(dtype).itemsize
    traces = trace(name, p, count * itemsize, dtype=dtype, check=check)
    result = collectives.simulate(p, lambda comm: run_for_real(name, comm, real_input(name, p, count, dtype), check))
    assert traced_messages(traces) == simulated_messages(result, p, keep_check=check)


@pytest.mark.parametrize("name", ALLREDUCE)
@pytest.mark.parametrize("p", [2, 3, 5, 8, 12])
def test_reduced_bytes_are_the_model_s_gamma_term_on_the_critical_path(name, p):
    """Every rank's reductions add up to at most the model's; the busiest rank's, for equal blocks, to exactly it."""
    nbytes = 4 * 8 * 3 * 5 * 7 * 11  # divisible by every p here times 4 bytes: equal blocks
    reduced = [sum(e.nbytes for e in events if e.call == "reduce") for events in trace(name, p, nbytes)]
    if name == "naive" or name == "tree":  # the root reduces everything
        assert reduced[0] == cost.terms(name, p, nbytes).reduced
    else:
        assert max(reduced) <= cost.terms(name, p, nbytes).reduced + 1e-9


def test_messages_per_rank_match_the_model():
    for name in ALLREDUCE:
        for p in (1, 2, 3, 6, 9, 16):
            counts = [len(sent) for sent in traced_messages(trace(name, p, 64))]
            assert counts == cost.messages_per_rank(name, p), (name, p)


def test_size_only_buffers_cost_no_memory():
    """A 256 MiB ring on 4 ranks: the arrays are never touched, so the process does not grow by their size."""
    import resource

    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    traces = trace("ring", 4, 256 << 20)
    grown = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) * 1024
    assert grown < 32 << 20
    assert sum(e.nbytes for e in traces[0] if e.call == "reduce") == 3 * (64 << 20)


def test_dup_and_nonblocking_calls_are_recorded():
    def fn(comm):
        other = comm.Dup()
        peer = 1 - comm.Get_rank()
        requests = [other.Irecv(np.empty(3), peer, 5), other.Isend(np.empty(2), peer, 5)]
        requests[0].Waitall(requests)

    rows = trace_function(2, fn)
    assert [r[0] for r in rows[0]] == [4, 3, 5, 5] and rows[0][0][8] != 0  # irecv, isend, wait, wait; a new context
    assert rows[0][0][3] == 24 and rows[0][1][3] == 16


def test_bad_input():
    with pytest.raises(ValueError, match="unknown call 'rings'.*ring"):
        trace("rings", 4, 64)
    with pytest.raises(ValueError, match="multiple of float32"):
        trace("ring", 4, 6)
    with pytest.raises(ValueError, match="positive integer"):
        trace("ring", 0, 64)
    with pytest.raises(ValueError, match="out of range"):
        TraceComm(0, 2).Send(np.empty(1), 2)
    with pytest.raises(MemoryError, match="p=4096.*GiB"):
        check_memory("ring", 4096, available=1 << 30)
