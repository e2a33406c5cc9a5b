"""Issue 27 (B19) under real MPI processes: a checkpoint whose rank_state holds an object on one rank fails on
every rank, where that rank alone raised and the root waited for its state forever."""

import pytest

import minidl.distributed as dist
from collectives import MismatchError
from minidl import nn


def test_an_object_in_one_ranks_state_fails_on_every_rank(comm, tmp_path_factory):
    path = str(tmp_path_factory.getbasetemp() / "c.npz")  # each rank's own directory: rank 0 writes nothing here
    bad = comm.Get_size() - 1
    state = {"rng": "x", "extra": object() if comm.Get_rank() == bad else 1}
    error = TypeError if comm.Get_rank() == bad else MismatchError
    with pytest.raises(error, match="cannot send a object" if comm.Get_rank() == bad else rf"ranks \[{bad}\] have"):
        dist.save_checkpoint(path, nn.Linear(2, 2), rank_state=state, comm=comm)
