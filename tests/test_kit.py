"""The property-test kit itself: its pieces, its report, its command line (the catalogue of bugs it must
catch is tests/test_kit_catalogue.py)."""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest
from hypothesis import given, settings

import collectives
from collectives.kit.cases import groups, split_args
from collectives.kit.report import decode, describe
from collectives.kit.spec import Expected, reference, wrong
from collectives.testing import (
    COLLECTIVES,
    Cost,
    PropertyFailure,
    allreduce_property,
    cases,
    check,
    rank_data,
    run_case,
)

MPIEXEC = os.path.join(os.path.dirname(sys.executable), "mpiexec")


@pytest.mark.parametrize("p", [1, 2, 5, 8])
@pytest.mark.parametrize("layout", ["world", "reversed", "halves", "odd-even"])
def test_layouts_partition_the_ranks_as_split_makes_them(p, layout):
    members = groups(p, layout)
    assert sorted(w for g in members for w in g) == list(range(p)) and all(members)
    for w in range(p):
        color, key = split_args(p, layout, w)
        assert members[color][key] == w


def test_traceable_values_name_their_ranks_and_elements():
    xs = [rank_data(0, r, (5,), "float32", values="traceable") for r in range(3)]
    assert decode(xs[0] + xs[2]) == [((0, 2), i) for i in range(5)]
    assert describe((xs[1][1:4]).tobytes()) == "x1[1:4]"
    assert describe((xs[0] + xs[1]).tobytes()) == "(x0+x1)[0:5]"
    assert describe(np.array([-5, 3], np.int64).tobytes()) == "?, (x0+x1)[0:1]"  # -5 is no partial sum


def test_reference_is_x_itself_on_one_rank_and_mpi_logical_values_beyond():
    x = np.array([0, 3, -2], np.int16)
    assert reference("land", [x]).tolist() == [0, 3, -2]
    assert reference("land", [x, np.array([5, 0, 1], np.int16)]).tolist() == [0, 0, 1]
    assert reference("sum", [np.array([100], np.int8)] * 2).tolist() == [-56]  # wraps, as MPI does


def test_float_bound_passes_any_order_and_fails_a_narrower_accumulation():
    xs = [rank_data(1, r, (1000,), "float64", values="wide") for r in range(7)]
    want = Expected(reference("sum", xs), xs)
    backwards = xs[6].copy()
    for x in xs[5::-1]:
        backwards += x
    assert not wrong(backwards, want, "sum").any()
    narrow = np.sum([x.astype(np.float32) for x in xs], axis=0).astype(np.float64)
    assert wrong(narrow, want, "sum").any()


@settings(max_examples=30, deadline=None)
@given(case=cases("allreduce", max_ranks=9))
def test_the_strategies_compose_with_a_users_own_given(case):
    assert run_case(collectives.ring.allreduce, case).ok


def test_every_collective_of_the_table_has_a_passing_package_page():
    # the full check of every page, at more examples, is in tests/test_kit_catalogue.py
    pages = {
        "allreduce": collectives.ring.allreduce,
        "reduce": collectives.tree.reduce,
        "broadcast": collectives.tree.broadcast_into,
        "reduce_scatter": collectives.ring.reduce_scatter,
        "reduce_scatterv": collectives.rabenseifner.reduce_scatter,
        "allgatherv": lambda comm, x, b: _allgatherv(comm, x, b),
        "gatherv": collectives.naive.gatherv,
        "alltoallv": collectives.exchange.pairwise,
        "scan": collectives.prefix.scan,
        "exscan": lambda comm, x, f: collectives.prefix.scan(comm, x, f, inclusive=False),
    }
    for name, fn in pages.items():
        assert check(fn, name, examples=8, max_ranks=7, large=False).examples >= 8, name


def _allgatherv(comm, x, b):
    buf = np.empty(b[-1], x.dtype)
    buf[b[comm.Get_rank()] : b[comm.Get_rank() + 1]] = x
    collectives.ring.allgather_into(comm, buf, list(b))
    return buf


def ring_missing_last_block(comm, x, f):
    """Every rank skips the allgather's last step: one block is missing on every rank for p >= 2."""
    p = comm.Get_size()
    b = collectives.common.block_bounds(x.size, p)
    acc = np.zeros_like(x)
    collectives.ring.reduce_scatter_into(comm, x, acc, f, b)
    rank = comm.Get_rank()
    for s in range(p - 2):
        send, recv = (rank - s) % p, (rank - s - 1) % p
        comm.Sendrecv(acc[b[send] : b[send + 1]], (rank + 1) % p, 8, acc[b[recv] : b[recv + 1]], (rank - 1) % p, 8)
    return acc


def test_a_failure_is_shrunk_and_reported_with_its_messages(tmp_path):
    with pytest.raises(PropertyFailure) as info:
        check(ring_missing_last_block, "allreduce", diagram=str(tmp_path / "d.png"))
    failure = info.value
    assert failure.property == "result"
    assert failure.case.p == 2 and failure.case.n == 1  # the smallest case where a block is lost
    text = str(failure)
    for part in [
        "smallest failing case",
        "inputs (abridged)",
        "expected against got",
        "first wrong: rank",
        "step   1:",
    ]:
        assert part in text, part
    assert "1->0 x1[0:1]" in text  # the step table reads the traceable run: rank 1 sends its block 0
    if failure.diagram:
        assert (tmp_path / "d.png").stat().st_size > 1000


def test_properties_named_for_deadlock_mutation_and_cost():
    def blocking(comm, x, f):  # every rank sends first: fine with buffering, a deadlock with synchronous sends
        r, p = comm.Get_rank(), comm.Get_size()
        out = x.copy()
        for s in range(1, p):
            tmp = np.empty_like(x)
            comm.Send(x, (r + s) % p, 0)
            comm.Recv(tmp, (r - s) % p, 0)
            out += tmp
        return out

    with pytest.raises(PropertyFailure) as info:
        check(blocking, "allreduce", ops=["sum"], dtypes=["int64"])
    assert info.value.property == "completes" and "blocked in Send" in str(info.value)

    def mutating(comm, x, f):
        f(x, 0, out=x)
        x[...] = collectives.ring.allreduce(comm, x, f)
        return x.copy()

    with pytest.raises(PropertyFailure) as info:
        check(mutating, "allreduce", ops=["sum"], dtypes=["int32"])
    assert info.value.property == "inputs-untouched" and info.value.case.p == 2

    def naive_as_ring(comm, x, f):
        return collectives.naive.allreduce(comm, x, f)

    with pytest.raises(PropertyFailure) as info:
        check(naive_as_ring, "allreduce", cost=Cost(messages=lambda p: 2 * (p - 1)))
    assert info.value.property == "cost" and info.value.case.p == 2
    assert check(collectives.ring.allreduce, cost="ring", examples=20).examples >= 20


def test_allreduce_property_is_check_for_a_pytest_test():
    assert allreduce_property(collectives.tree.allreduce, examples=10).collective == "allreduce"
    assert allreduce_property.__name__ == "allreduce_property" and set(COLLECTIVES) >= {"alltoall", "scatterv"}


def test_edge_cases_come_first_so_p_1_bugs_show_at_p_1():
    def broken_alone(comm, x, f):
        if comm.Get_size() == 1:
            return np.zeros_like(x)[:0]
        return collectives.ring.allreduce(comm, x, f)

    with pytest.raises(PropertyFailure) as info:
        check(broken_alone, "allreduce", examples=5)
    assert info.value.case.p == 1 and info.value.property == "shape-dtype"


USER_FILE = textwrap.dedent(
    """
    import numpy as np

    def good(comm, x, f):
        import collectives
        return collectives.ring.allreduce(comm, x, f)

    def bad(comm, x, f):
        return x.copy()

    def two_args(comm, x):
        return x
    """
)


def run_check(tmp_path, *args, mpi=0):
    (tmp_path / "mine.py").write_text(USER_FILE)
    cmd = [sys.executable, "-m", "collectives.check", *args]
    if mpi:
        cmd = [MPIEXEC, "-n", str(mpi), *cmd, "--mpi"]
    return subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_command_line_exit_status(tmp_path):
    assert run_check(tmp_path, "mine.py:good", "--examples", "20").returncode == 0
    bad = run_check(tmp_path, "mine.py:bad", "--seed", "1")
    assert bad.returncode == 1 and "smallest failing case: allreduce: p=2" in bad.stdout
    for args, words in [
        (["mine.py:two_args"], "cannot be called as fn(comm, x, f)"),
        (["mine.py:nothing"], "has no function 'nothing'"),
        (["missing.py:good"], "no such file"),
        (["mine.py:good", "--collective", "bcast"], "invalid choice"),
    ]:
        out = run_check(tmp_path, *args)
        assert out.returncode == 2 and words in out.stderr, (args, out.stderr)


@pytest.mark.skipif(not os.path.exists(MPIEXEC), reason="no mpiexec beside this Python (the mpich wheel)")
def test_command_line_under_mpiexec(tmp_path):
    assert run_check(tmp_path, "mine.py:good", "--examples", "10", mpi=3).returncode == 0
    bad = run_check(tmp_path, "mine.py:bad", "--examples", "10", mpi=3)
    assert bad.returncode == 1 and "under MPI at p = 3" in bad.stdout


def test_a_deadlock_keeps_the_messages_sent_before_it():
    def half_blocking(comm, x, f):  # a first Sendrecv round that works, then every rank Sends first
        r, p = comm.Get_rank(), comm.Get_size()
        tmp = np.empty_like(x)
        comm.Sendrecv(x, (r + 1) % p, 0, tmp, (r - 1) % p, 0)
        comm.Send(x, (r + 1) % p, 1)
        comm.Recv(tmp, (r - 1) % p, 1)
        return x + tmp

    out = run_case(half_blocking, collectives.testing.Case("allreduce", 3, 2))
    assert out.failures[0][0] == "completes" and len(out.messages) == 6  # 3 delivered, 3 stuck
    assert [m.arrival is None for m in out.messages].count(True) == 3
