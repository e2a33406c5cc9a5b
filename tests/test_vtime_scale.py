"""Scale (issue 23): the ring whose blocks do not split evenly is replayed by rounds from a few traced ranks.

Every rank's rounds of ``rounds.ring_schedule`` are held to the full traces of every rank, and the
rounds engine to the event engine, on cases both can run (benchmarks/simulate_scale.py times p = 1024).
"""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives.virtual_time.rounds import _rounds_of, matches, ring_schedule, symmetric_schedule
from collectives.virtual_time.trace import trace_rows


@pytest.mark.parametrize("p,nbytes", [(5, 4 * 7), (24, 4 * 1001), (40, 4 * 3), (130, 4 * 999)])
def test_ring_schedule_is_every_rank_s_trace(p, nbytes):
    schedule = symmetric_schedule("ring", p, nbytes)
    assert schedule is not None and schedule.blocks is not None  # unequal blocks: the rotating schedule
    for rank, rows in enumerate(trace_rows("ring", p, nbytes)):
        real = np.array(_rounds_of(rows, rank), dtype=np.int64).reshape(-1, 6)[:, [0, 3, 2, 5]]
        assert (schedule.of_rank(rank) == real).all()


def test_matches_refuses_a_schedule_that_is_not_the_code_s():
    traces = dict(enumerate(trace_rows("ring", 6, 4 * 13)))
    assert matches(ring_schedule(6, 4 * 13), traces)
    assert not matches(ring_schedule(6, 4 * 19), traces)  # other block sizes
    assert not matches(ring_schedule(7, 4 * 13), traces)  # other rounds and peers
    assert symmetric_schedule("ring", 6, 4 * 13, check=True) is None  # the agreement check is no round


@pytest.mark.parametrize("options", [{}, {"topology": "fattree", "leaf_size": 8, "oversubscription": 2.0}])
def test_rounds_and_events_agree_on_unequal_blocks(options):
    for nbytes in (4 * 1001, 4 * 250_007):
        events = collectives.allreduce_time("ring", 72, nbytes, "10gbe", engine="events", **options)
        assert collectives.allreduce_time("ring", 72, nbytes, "10gbe", **options) == pytest.approx(events, rel=1e-12)
