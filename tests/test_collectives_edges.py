"""Collectives at their edges (issue 27), on simulated ranks (a hang is a DeadlockError here, found at once):
alltoall with the wrong number of rows on one rank, ranks that pick different algorithms or an unknown one,
a maxloc/float mismatch, object arrays and minidl Tensors, and allreduce(check=False) with unequal sizes.
tests/mpi/test_collectives_edges_mpi.py runs the hangs under mpiexec."""

import numpy as np
import pytest
from helpers.ranks import errors_on_every_rank

import collectives
import minidl


@pytest.mark.parametrize("p", [2, 4, 5])
@pytest.mark.parametrize("algorithm", ["auto", "pairwise", "bruck"])
def test_alltoall_wrong_rows_on_one_rank_is_named_on_every_rank(p, algorithm):
    def call(comm):
        rows = p - 1 if comm.Get_rank() == 1 else p
        collectives.alltoall(comm, np.zeros((rows, 2)), algorithm)

    msg = errors_on_every_rank(p, call, collectives.MismatchError)
    assert f"ranks [1]: {'bruck' if algorithm == 'auto' else algorithm}.alltoall with shape ({p - 1}, 2)" in msg


def test_alltoall_wrong_rows_on_every_rank_is_a_value_error_everywhere():
    msg = errors_on_every_rank(3, lambda comm: collectives.alltoall(comm, np.zeros((2, 2))), ValueError)
    assert msg == "alltoall: x must have shape (3, ...) for 3 ranks, got (2, 2)"


MIXED = {
    "alltoall": lambda comm, a: collectives.alltoall(comm, np.arange(4.0) + 10 * comm.Get_rank(), a),
    "allreduce": lambda comm, a: collectives.allreduce(comm, np.ones(3), algorithm=a),
    "allgather": lambda comm, a: collectives.allgather(comm, np.ones(3), a),
    "reduce_scatter": lambda comm, a: collectives.reduce_scatter(comm, np.ones(8), algorithm=a),
}
CHOICES = {
    "alltoall": ("pairwise", "bruck"),
    "allreduce": ("ring", "tree"),
    "allgather": ("ring", "recursive_doubling"),
    "reduce_scatter": ("ring", "recursive_halving"),
}


@pytest.mark.parametrize("collective", MIXED)
def test_ranks_that_pick_different_algorithms_get_a_mismatch_error(collective):
    first, other = CHOICES[collective]
    call = MIXED[collective]
    msg = errors_on_every_rank(4, lambda comm: call(comm, other if comm.Get_rank() == 3 else first))
    assert "ranks called different collectives (or algorithms)" in msg
    assert f"ranks [3]: {other}.{collective}" in msg and f"ranks [0, 1, 2]: {first}.{collective}" in msg


@pytest.mark.parametrize("collective", MIXED)
def test_an_unknown_algorithm_on_one_rank_raises_on_every_rank(collective):
    first, _ = CHOICES[collective]
    call = MIXED[collective]
    msg = errors_on_every_rank(3, lambda comm: call(comm, "rign" if comm.Get_rank() == 1 else first))
    assert f"ranks [1]: rign.{collective}" in msg
    msg = errors_on_every_rank(3, lambda comm: call(comm, "rign"), ValueError)
    assert msg.startswith(f"unknown {collective} algorithm 'rign': expected")


def test_maxloc_against_floats_is_a_clear_mismatch():
    def call(comm):
        x = collectives.pairs(np.ones(3), np.arange(3)) if comm.Get_rank() else np.ones(3)
        collectives.allreduce(comm, x, "maxloc")

    msg = errors_on_every_rank(3, call, collectives.MismatchError)
    assert "ranks [0]: recursive_doubling.allreduce with shape (3,) dtype float64, op 'maxloc'" in msg
    assert "ranks [1, 2]: recursive_doubling.allreduce with shape (3,) dtype (float64, int64) pairs" in msg
    msg = errors_on_every_rank(2, lambda comm: collectives.allreduce(comm, np.ones(3), "maxloc"), TypeError)
    assert "op 'maxloc' needs (value, index) pairs" in msg


OBJECTS = {
    "allreduce": lambda comm, x: collectives.allreduce(comm, x),
    "allgather": lambda comm, x: collectives.allgather(comm, x),
    "broadcast": lambda comm, x: collectives.broadcast(comm, x),
    "gather": lambda comm, x: collectives.gather(comm, x),
    "allgatherv": lambda comm, x: collectives.allgatherv(comm, x),
    "scan": lambda comm, x: collectives.scan(comm, x),
}


@pytest.mark.parametrize("collective", OBJECTS)
def test_tensors_and_object_arrays_are_refused_on_every_rank(collective):
    call = OBJECTS[collective]
    msg = errors_on_every_rank(3, lambda comm: call(comm, minidl.tensor(np.ones(2))), TypeError)
    assert "dtype object (Python objects, or a minidl Tensor) cannot be sent" in msg and "pass tensor.data" in msg
    errors_on_every_rank(2, lambda comm: call(comm, np.array([1, "a"], dtype=object)), TypeError)


def test_a_tensor_on_one_rank_is_named_on_every_rank():
    def call(comm):
        x = np.ones(2)
        collectives.allgather(comm, minidl.tensor(x) if comm.Get_rank() == 2 else x)

    msg = errors_on_every_rank(3, call, collectives.MismatchError)
    assert "ranks [2]: ring.allgather with shape (2,) dtype object (Python objects, or a minidl Tensor: pass" in msg


def test_allreduce_without_the_check_documents_its_price():
    """check=False at p = 2 with unequal sizes: what the docstring says, one rank wrong and one truncated."""

    def call(comm):
        try:
            return collectives.allreduce(comm, np.ones(3 + comm.Get_rank()), algorithm="ring", check=False)
        except ValueError as e:
            return e

    res = collectives.simulate(2, call, timeout=20)
    assert "truncated" in str(res[0]) and res[1].shape == (4,)
    assert "message truncated" in collectives.allreduce.__doc__


@pytest.mark.parametrize(
    "call",
    [
        lambda comm, root: collectives.reduce(comm, np.ones(3), root=root),
        lambda comm, root: collectives.broadcast(comm, np.ones(3), root=root),
        lambda comm, root: collectives.gather(comm, np.ones(3), root=root),
        lambda comm, root: collectives.gatherv(comm, np.ones(3), root=root),
        lambda comm, root: collectives.scatter(comm, np.ones((3, 2)), root=root),
    ],
)
@pytest.mark.parametrize("root", [0.0, "0", True, None])
def test_a_root_that_is_not_an_int_is_named_on_every_rank(call, root):
    """Issue 32: reduce(..., root=0.0) failed with "unsupported operand type(s) for &"."""
    msg = errors_on_every_rank(3, lambda comm: call(comm, root), TypeError)
    assert f"root must be a rank, an int in 0..2, got {root!r} ({type(root).__name__})" in msg, msg


def test_a_root_given_as_a_numpy_int_is_a_rank():
    res = collectives.simulate(2, lambda comm: collectives.reduce(comm, np.ones(3), root=np.int64(1)))
    assert res[0] is None and np.array_equal(res[1], [2.0, 2.0, 2.0])
