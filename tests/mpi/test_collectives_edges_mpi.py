"""Issue 27's collective hangs under real MPI processes: alltoall with the wrong number of rows on one rank, ranks
that pick different alltoall algorithms or an unknown one, and a minidl Tensor on one rank. Every rank must raise
(a rank that did not would leave the others waiting: the conftest aborts the job, make's timeout ends a hang)."""

import numpy as np
import pytest

import collectives
import minidl
from collectives import MismatchError


def test_alltoall_with_the_wrong_rows_on_one_rank_fails_on_every_rank(comm):
    p, last = comm.Get_size(), comm.Get_size() - 1
    x = np.zeros((p + 1 if comm.Get_rank() == last else p, 3))
    with pytest.raises(MismatchError, match=rf"ranks \[{last}\]: pairwise.alltoall with shape \({p + 1}, 3\)"):
        collectives.alltoall(comm, x, "pairwise")


def test_alltoall_bruck_on_one_rank_and_pairwise_on_the_others_fails_on_every_rank(comm):
    last = comm.Get_size() - 1
    x = np.arange(comm.Get_size(), dtype=np.float64) + 10 * comm.Get_rank()
    with pytest.raises(MismatchError, match=rf"ranks \[{last}\]: bruck.alltoall"):
        collectives.alltoall(comm, x, "bruck" if comm.Get_rank() == last else "pairwise")


def test_an_unknown_algorithm_on_one_rank_fails_on_every_rank(comm):
    with pytest.raises(MismatchError, match=r"ranks \[0\]: rign.allreduce"):
        collectives.allreduce(comm, np.ones(5), algorithm="rign" if comm.Get_rank() == 0 else "ring")


def test_a_tensor_on_one_rank_fails_on_every_rank(comm):
    x = np.ones(4)
    with pytest.raises(MismatchError, match=r"ranks \[0\]: .* dtype object \(Python objects, or a minidl Tensor"):
        collectives.allgather(comm, minidl.tensor(x) if comm.Get_rank() == 0 else x)
    with pytest.raises(TypeError, match="pass tensor.data"):
        collectives.broadcast(comm, minidl.tensor(x))
