"""Hierarchical allreduce on simulated ranks: equal to NumPy's sum, bitwise the same on every rank."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
from collectives.algorithms.hierarchical import hierarchical_allreduce


@settings(max_examples=12, deadline=None)
@given(
    layout=st.sampled_from([(4, 2), (6, 2), (6, 3), (4, 1), (4, 4), (2, 2)]),
    n=st.integers(1, 40),
    seed=st.integers(0, 2**16),
    op=st.sampled_from(["sum", "max"]),
)
def test_matches_numpy_and_every_rank_agrees(layout, n, seed, op):
    p, k = layout
    xs = np.random.default_rng(seed).standard_normal((p, n))
    out = collectives.simulate(p, lambda comm: hierarchical_allreduce(comm, xs[comm.Get_rank()], op, ranks_per_node=k))
    want = xs.sum(axis=0) if op == "sum" else xs.max(axis=0)
    np.testing.assert_allclose(out[0], want, rtol=1e-12, atol=1e-12)
    assert all(np.array_equal(o, out[0]) for o in out)


def test_shape_and_integer_dtype_are_kept():
    xs = np.arange(6 * 2 * 3, dtype=np.int64).reshape(6, 2, 3)
    out = collectives.simulate(6, lambda comm: hierarchical_allreduce(comm, xs[comm.Get_rank()], ranks_per_node=3))
    assert out[0].dtype == np.int64 and out[0].shape == (2, 3) and np.array_equal(out[5], xs.sum(axis=0))


def test_nodes_of_unequal_size_and_bad_groupings_are_refused():
    with pytest.raises(ValueError, match="ranks_per_node=4 must divide the 6 ranks"):
        collectives.simulate(6, lambda comm: hierarchical_allreduce(comm, np.ones(3), ranks_per_node=4))


@pytest.mark.parametrize("p, k", [(8, 2), (12, 4), (16, 16), (6, 1)])
def test_virtual_time_equals_the_closed_form(p, k):
    """allreduce_time("hierarchical") replays the real schedule: the module doc's T to 1e-9 on even blocks."""
    from collectives.algorithms.hierarchical import predict
    from collectives.cost import CostParams
    from collectives.virtual_time.network import LINKS

    inside = CostParams(5e-6, 3e-10, 2e-10)  # the link within a node (as calibrated here), and gamma
    ten = LINKS["10gbe"]
    across = CostParams(ten.alpha, ten.beta, inside.gamma)
    nbytes, net = 4 * p * 1000, {"ranks_per_node": k, "topology": "crossbar"}  # a wire per pair: no sharing
    got = collectives.allreduce_time("hierarchical", p, nbytes, "10gbe", inside, **net)
    assert got == pytest.approx(predict(p, k, nbytes, inside, across), rel=1e-9)
    ring = collectives.allreduce_time("ring", p, nbytes, "10gbe", inside, **net)
    assert (got < ring) == (1 < k < p) or k == 1  # fewer network latencies once a node holds several ranks


def test_virtual_time_traces_uneven_blocks_and_the_check():
    """n not a multiple of k (padded blocks), with the agreement checks of all three steps."""
    t = collectives.allreduce_time("hierarchical", 6, 4 * 7, "10gbe", check=True, ranks_per_node=3)
    assert t > collectives.allreduce_time("hierarchical", 6, 4 * 7, "10gbe", ranks_per_node=3) > 0


@pytest.mark.parametrize(
    "p, k, nbytes, rel", [(64, 4, 4 * 64 * 10, 1e-9), (128, 16, 1 << 20, 1e-9), (96, 8, 4 * 1001, 0.01)]
)
def test_rounds_replay_equals_the_event_replay(p, k, nbytes, rel):
    """From p = 64 on, allreduce_time replays the hierarchical rounds from a sample of traced ranks (node and
    local rank shifted together): the time of every rank traced and replayed event by event. With unequal blocks
    (n not a multiple of p) a round's flows are shared as if they ended together: within 1% here."""
    kw = {"ranks_per_node": k, "topology": "fattree", "leaf_size": 4}
    rounds = collectives.allreduce_time("hierarchical", p, nbytes, "10gbe", engine="rounds", **kw)
    events = collectives.allreduce_time("hierarchical", p, nbytes, "10gbe", engine="events", **kw)
    assert rounds == pytest.approx(events, rel=rel)
