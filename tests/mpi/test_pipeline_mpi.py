"""Under mpiexec -n P: a P-stage pipeline (GPipe and 1F1B) takes the same steps as one process.

The model has 6 layers with parameters, so every size the suite runs (2 to 5) gives every stage
weights; at size 4 the ranks also form a 2 x 2 dp x pp grid. Every rank computes the single-process
reference itself (the model is tiny) and checks its own stage. float64, 1e-8 relative.
"""

import pytest
from helpers.pipeline import (
    BATCH,
    assert_matches,
    make_batches,
    train_pipeline,
    train_single,
)

from minidl.distributed.pipeline.engine import make_grid
from minidl.distributed.pipeline.schedule import SCHEDULES, bubble_fraction

pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


@pytest.mark.parametrize("sched", SCHEDULES)
@pytest.mark.parametrize("m", [1, 5, 12])
def test_pipeline_equals_single_process(comm, sched, m):
    batches = make_batches()
    want = train_single(batches)
    got, pipe = train_pipeline(comm, batches, sched, m)
    assert_matches(got, want, f"rank {comm.Get_rank()}, {sched}, P={comm.Get_size()}, m={m}: ")
    p, s = comm.Get_size(), comm.Get_rank()
    assert pipe.peak_stashed == (m if sched == "gpipe" else min(p - s, m))
    events = pipe.gather_events()
    if s == 0:
        assert len(events) == 2 * m * p and 0 <= bubble_fraction(events, p) < 1


@pytest.mark.parametrize("sched", SCHEDULES)
def test_dp_by_pp_equals_single_process(comm, sched):
    if comm.Get_size() != 4:
        pytest.skip("the dp x pp grid test runs as 2 x 2, at size 4 only")
    batches = make_batches()
    want = train_single(batches)
    grid = make_grid(comm, 2)
    assert (grid.dp, grid.pp) == (2, 2) and grid.pp_comm.Get_rank() == grid.stage
    half = BATCH // grid.dp
    lo, hi = grid.replica * half, (grid.replica + 1) * half
    got, _ = train_pipeline(grid.pp_comm, [(x[lo:hi], y[lo:hi]) for x, y in batches], sched, 3, grid.dp_comm)
    assert_matches(got, want, f"rank {comm.Get_rank()}, {sched}, 2x2: ")
    grid.pp_comm.Free()
    grid.dp_comm.Free()
