"""P ranks with batch b take the same steps as one process with batch P*b (float64, to 1e-8 relative).

For the LSTM language model (truncated BPTT, gradient clipping on the averaged gradients), a small CNN,
and the CNN with SyncBatchNorm, on the simulated communicator (threads) for P = 2, 3, 4 and every
allreduce algorithm. tests/mpi/test_dp_equivalence.py runs the same helpers under mpiexec.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.distributed_equivalence import (  # noqa: F401
    ALGORITHMS,
    BPTT,
    CNN_BATCH,
    CNN_N,
    HIDDEN,
    LAYERS,
    LM_BATCH,
    MODELS,
    RTOL,
    STEPS,
    VOCAB,
    _sync_and_clip,
    _train_cnn,
    _train_lm,
    assert_replicas_identical,
    assert_same_state,
    collectives,
    image_data,
    initial_state,
    lm_corpus,
    make_cnn,
    make_lm,
    pytestmark,
    train,
)

import minidl.distributed as dist
from minidl import optim


@pytest.mark.parametrize("kind", sorted(MODELS))
@pytest.mark.parametrize("algorithm", ALGORITHMS)
@pytest.mark.parametrize("P", [2, 3, 4])
def test_data_parallel_equals_big_batch_simulated(kind, algorithm, P):
    init = initial_state(kind)
    want = train(kind, init, STEPS, world=P)
    states = collectives.simulate(P, lambda comm: train(kind, init, STEPS, comm, algorithm, world=P))
    assert_replicas_identical(states)
    assert_same_state(states[0], want, what=f"{kind}, {algorithm}, P={P}: ")
    moved = max(float(np.max(np.abs(want[k] - init[k]))) for k in init if init[k].dtype.kind == "f")
    assert moved > 1e-3  # the runs really trained


def test_per_rank_batchnorm_is_not_the_big_batch():
    """Without SyncBatchNorm each rank normalizes its own b examples: a different (Goyal et al.) model."""
    init = initial_state("cnn_syncbn")
    want = train("cnn_syncbn", init, STEPS, world=2)

    def per_rank_bn(comm):
        dist.init(comm)
        model = make_cnn(batchnorm=True)
        model.load_state_dict(init)
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.5, momentum=0.9, weight_decay=1e-3))
        _train_cnn(model, opt, STEPS, dist.rank(), 2, 2)
        return model.state_dict()

    got = collectives.simulate(2, per_rank_bn)
    assert_replicas_identical([{k: v for k, v in s.items() if "running" not in k} for s in got])
    with pytest.raises(AssertionError, match="relative difference"):
        assert_same_state(got[0], want)


@pytest.mark.parametrize("compression", [None, "fp16"])
def test_fusion_threshold_does_not_change_the_result(compression):
    init = initial_state("lm")
    runs = {}
    for fusion_bytes in (0, 256, 1 << 26):
        runs[fusion_bytes] = collectives.simulate(
            2,
            lambda comm, fb=fusion_bytes: train(
                "lm", init, 2, comm, "ring", world=2, fusion_bytes=fb, compression=compression
            ),
        )[0]
    # bucket boundaries do not change any element's sum (same order of the same two addends)
    for fb in (256, 1 << 26):
        for k in init:
            assert runs[fb][k].tobytes() == runs[0][k].tobytes(), (fb, k)


@pytest.mark.parametrize("kind", ["lm", "cnn_syncbn"])
@pytest.mark.parametrize("algorithm", ["hierarchical", "hierarchical_rs"])
@pytest.mark.parametrize("P, k", [(4, 2), (6, 3), (6, 2), (4, 1), (4, 4)])
def test_hierarchical_allreduce_equals_big_batch_simulated(kind, algorithm, P, k, monkeypatch):
    """allreduce='hierarchical' (the leader schedule) and 'hierarchical_rs' with nodes of k ranks
    (MINIDL_RANKS_PER_NODE; the in-process ranks share no memory)."""
    monkeypatch.setenv("MINIDL_RANKS_PER_NODE", str(k))
    init = initial_state(kind)
    want = train(kind, init, STEPS, world=P)
    states = collectives.simulate(P, lambda comm: train(kind, init, STEPS, comm, algorithm, world=P))
    assert_replicas_identical(states)
    assert_same_state(states[0], want, what=f"{kind}, {algorithm}, P={P}, k={k}: ")


def test_hierarchical_allreduce_needs_nodes_on_the_in_process_communicator(monkeypatch):
    monkeypatch.delenv("MINIDL_RANKS_PER_NODE", raising=False)
    with pytest.raises(ValueError, match="MINIDL_RANKS_PER_NODE=K"):
        collectives.simulate(2, lambda comm: dist.allreduce(comm, np.ones(3), "hierarchical"))
    monkeypatch.setenv("MINIDL_RANKS_PER_NODE", "two")
    with pytest.raises(ValueError, match="MINIDL_RANKS_PER_NODE must be a positive integer, got 'two'"):
        collectives.simulate(2, lambda comm: dist.allreduce(comm, np.ones(3), "hierarchical"))
