"""hierarchical_rs whose blocks do not split evenly, replayed by rounds from a few traced ranks (issue 35).

Its blocks rotate with the local rank inside a node and with the node across (``rounds.node_ring_schedule``), so
no relabelling of rank 0's trace gives the others'. Before, ``symmetric_schedule`` gave up and every rank was
traced: a MemoryError (75 GiB) at p = 8192 for a bucket of 3,276,804 bytes, where 3,276,800 took a second.
"""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives.virtual_time.rounds import _rounds_of, matches, node_ring_schedule, symmetric_schedule
from collectives.virtual_time.trace import trace_rows


@pytest.mark.parametrize(
    "p,k,nbytes", [(12, 3, 4 * 7), (24, 4, 4 * 1001), (16, 8, 4 * 5), (8, 1, 4 * 9), (6, 6, 4 * 7)]
)
def test_node_ring_schedule_is_every_rank_s_trace(p, k, nbytes):
    schedule = symmetric_schedule(f"hierarchical_rs:{k}", p, nbytes)
    assert schedule is not None
    for rank, rows in enumerate(trace_rows(f"hierarchical_rs:{k}", p, nbytes)):
        real = np.array(_rounds_of(rows, rank), dtype=np.int64).reshape(-1, 6)[:, [0, 3, 2, 5]]
        assert (schedule.of_rank(rank) == real).all(), rank


def test_matches_refuses_other_blocks_and_nodes():
    traces = dict(enumerate(trace_rows("hierarchical_rs:4", 24, 4 * 1001)))
    assert matches(node_ring_schedule(24, 4, 4 * 1001), traces)
    assert not matches(node_ring_schedule(24, 4, 4 * 1003), traces)  # other block sizes
    assert not matches(node_ring_schedule(24, 6, 4 * 1001), traces)  # other nodes


def test_rounds_agree_with_events_on_the_lm_bucket():
    """p = 256 in nodes of 8 with the LM's 2,496,000-byte bucket: unequal blocks across the 32 nodes."""
    events = collectives.allreduce_time("hierarchical_rs", 256, 2_496_000, "10gbe", ranks_per_node=8, engine="events")
    rounds = collectives.allreduce_time("hierarchical_rs", 256, 2_496_000, "10gbe", ranks_per_node=8, engine="rounds")
    assert rounds == pytest.approx(events, rel=1e-9)


def test_unequal_blocks_at_scale_trace_a_few_ranks():
    """p = 2048: tracing every rank would take GiBs; by rounds, 4 bytes more cost at most a few per mille."""
    assert symmetric_schedule("hierarchical_rs:8", 2048, 3_276_804) is not None
    options = {"ranks_per_node": 8, "topology": "fattree"}
    unequal = collectives.allreduce_time("hierarchical_rs", 2048, 3_276_804, "10gbe", **options)
    equal = collectives.allreduce_time("hierarchical_rs", 2048, 3_276_800, "10gbe", **options)
    assert equal < unequal < 1.005 * equal
