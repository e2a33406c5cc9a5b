"""Under mpiexec -n P: P ranks with batch b take the same steps as one process with batch P*b.

Every rank also computes the single-process reference itself (the models are tiny), so each rank
checks its own replica. float64, 1e-8 relative, for the LSTM LM, the CNN and the CNN with
SyncBatchNorm, with every allreduce algorithm and MPI's own.
"""

import pytest
from helpers.distributed_equivalence import (
    MODELS,
    STEPS,
    assert_same_state,
    initial_state,
    train,
)

import minidl.distributed as dist

ALGORITHMS = ["ring", "tree", "naive", "recursive_doubling", "rabenseifner", "auto", "mpi"]


pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_data_parallel_equals_big_batch(comm, kind, algorithm):
    P = comm.Get_size()
    init = initial_state(kind)
    want = train(kind, init, STEPS, world=P)
    got = train(kind, init, STEPS, comm, algorithm, world=P)
    assert_same_state(got, want, what=f"rank {comm.Get_rank()}, {kind}, {algorithm}, P={P}: ")
    # the replicas are bitwise identical: compare every rank's bytes with rank 0's
    for k, v in got.items():
        root = v.copy()
        comm.Bcast(root, root=0)
        assert root.tobytes() == v.tobytes(), f"rank {comm.Get_rank()} differs from rank 0 in {k}"


@pytest.mark.parametrize("algorithm", ["ring", "mpi"])
def test_fp16_compression_stays_close(comm, algorithm):
    init = initial_state("cnn")
    want = train("cnn", init, 1, world=comm.Get_size())
    got = train("cnn", init, 1, comm, algorithm, world=comm.Get_size(), compression="fp16")
    assert_same_state(got, want, rtol=5e-3)
    dist.barrier()


@pytest.mark.parametrize("kind", ["lm", "cnn_syncbn"])
@pytest.mark.parametrize("algorithm", ["hierarchical", "hierarchical_rs"])
@pytest.mark.parametrize("k", ["shared memory", 1, 2, 3])
def test_hierarchical_allreduce_equals_big_batch(comm, kind, algorithm, k, monkeypatch):
    """allreduce='hierarchical' (the leader schedule) and 'hierarchical_rs': nodes of the ranks sharing memory (one
    here), or of k ranks (MINIDL_RANKS_PER_NODE)."""
    P = comm.Get_size()
    if k != "shared memory" and P % k:
        pytest.skip(f"nodes of {k} ranks do not divide {P}")
    if k == "shared memory":
        monkeypatch.delenv("MINIDL_RANKS_PER_NODE", raising=False)
    else:
        monkeypatch.setenv("MINIDL_RANKS_PER_NODE", str(k))
    init = initial_state(kind)
    want = train(kind, init, STEPS, world=P)
    got = train(kind, init, STEPS, comm, algorithm, world=P)
    assert_same_state(got, want, what=f"rank {comm.Get_rank()}, {kind}, {algorithm} (nodes: {k}), P={P}: ")
    for name, v in got.items():  # the replicas are bitwise identical
        root = v.copy()
        comm.Bcast(root, root=0)
        assert root.tobytes() == v.tobytes(), f"rank {comm.Get_rank()} differs from rank 0 in {name}"
