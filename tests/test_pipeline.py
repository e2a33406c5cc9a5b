"""Pipeline parallelism on the simulated communicator: schedules, exactness, activation memory, dp x pp.

Exactness: p stages with m micro-batches (GPipe or 1F1B) take the same SGD-with-momentum steps as one
process on the whole mini-batch (float64, 1e-8 relative). The helpers here are shared with
tests/mpi/test_pipeline_mpi.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.pipeline import (  # noqa: F401
    BATCH,
    BLOCKS,
    CLASSES,
    HIDDEN,
    IN,
    LR,
    MOMENTUM,
    STEPS,
    assert_matches,
    dependencies_respected,
    make_batches,
    make_model,
    pytestmark,
    simulate_f64,
    train_pipeline,
    train_single,
)
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import minidl.nn.functional as F
from collectives.inprocess import Status
from minidl import nn
from minidl.distributed.pipeline.engine import Pipeline, make_grid, split_sequential
from minidl.distributed.pipeline.schedule import (
    BACKWARD,
    FORWARD,
    SCHEDULES,
    bubble_formula,
    bubble_fraction,
    ideal_events,
    one_f_one_b,
    peak_in_flight,
    plot_schedule,
    schedule,
    stage_idle_fractions,
)


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 12), p=st.integers(1, 8))
def test_schedules_are_complete_valid_and_hold_what_they_should(m, p):
    for name in SCHEDULES:
        per_stage = [schedule(name, m, p, s) for s in range(p)]
        for ops in per_stage:
            assert sorted(ops) == sorted([(FORWARD, i) for i in range(m)] + [(BACKWARD, i) for i in range(m)])
        assert dependencies_respected(per_stage), name
    for s in range(p):
        assert peak_in_flight(schedule("gpipe", m, p, s)) == m
        assert peak_in_flight(one_f_one_b(m, p, s)) == min(p - s, m)


@settings(max_examples=25, deadline=None)
@given(m=st.integers(1, 10), p=st.integers(1, 6), tf=st.floats(0.5, 2.0), tb=st.floats(0.5, 3.0))
def test_ideal_timeline_bubble_is_the_formula(m, p, tf, tb):
    for name in SCHEDULES:
        events = ideal_events(name, m, p, tf, tb)
        assert bubble_fraction(events, p) == pytest.approx(bubble_formula(m, p), abs=1e-12)
        assert np.mean(list(stage_idle_fractions(events).values())) == pytest.approx(bubble_formula(m, p))


def test_schedule_errors():
    with pytest.raises(ValueError, match="schedule must be one of"):
        schedule("pipedream", 4, 2, 0)
    with pytest.raises(ValueError, match="micro-batches"):
        schedule("gpipe", 0, 2, 0)
    with pytest.raises(ValueError, match="stage 2 out of range"):
        schedule("1f1b", 4, 2, 2)
    with pytest.raises(ValueError, match="cannot split 3 layers into 4"):
        split_sequential(nn.Sequential(nn.Tanh(), nn.Tanh(), nn.Tanh()), 4, 0)
    assert len(split_sequential(make_model(), 4, 0)) == 2 and len(split_sequential(make_model(), 4, 3)) == 1


@pytest.mark.parametrize("sched", SCHEDULES)
@pytest.mark.parametrize("p, m", [(1, 3), (2, 1), (2, 4), (3, 5), (4, 4), (5, 12), (6, 7)])
def test_pipeline_equals_single_process(sched, p, m):
    batches = make_batches()
    want = train_single(batches)
    results = simulate_f64(p, lambda comm: train_pipeline(comm, batches, sched, m)[0])
    got = {k: v for r in results for k, v in r.items()}
    assert set(got) == set(want)  # the stages together hold the whole model, once
    assert_matches(got, want, f"{sched}, p={p}, m={m}: ")


def test_returned_loss_is_the_mini_batch_mean():
    ((x, y),) = make_batches(1)
    want = float(F.cross_entropy(make_model()(x), y).data)

    def run(comm):
        stage = split_sequential(make_model(), comm.Get_size(), comm.Get_rank())
        return Pipeline(stage, F.cross_entropy, "1f1b", 5, comm).train_step(x, y)

    assert simulate_f64(3, run) == [None, None, pytest.approx(want, rel=1e-12)]


def test_eval_step_is_the_forward_loss_and_leaves_no_gradients():
    ((x, y),) = make_batches(1)
    want = float(F.cross_entropy(make_model()(x), y).data)

    def run(comm):
        stage = split_sequential(make_model(), comm.Get_size(), comm.Get_rank())
        pipe = Pipeline(stage, F.cross_entropy, "1f1b", 4, comm)
        loss = pipe.eval_step(x, y)
        grads, evaluated = [p.grad for p in stage.parameters()], (pipe.peak_stashed, len(pipe.events))
        pipe.train_step(x, y)
        trained = (pipe.peak_stashed, len(pipe.events))
        pipe.eval_step(x, y)  # the report of the last training step survives an evaluation
        return loss, grads, evaluated, trained, (pipe.peak_stashed, len(pipe.events))

    res = simulate_f64(3, run)
    assert res[2][0] == pytest.approx(want, rel=1e-12) and res[0][0] is None
    assert all(g is None for r in res for g in r[1]) and all(r[2] == (0, 0) for r in res)
    assert [r[3] for r in res] == [(3, 8), (2, 8), (1, 8)]  # 1F1B at p = 3: stage s holds p - s, 2m events
    assert all(r[4] == r[3] for r in res)


@pytest.mark.parametrize("sched", SCHEDULES)
def test_dp_by_pp_equals_single_process(sched):
    """2 pipelines x 2 stages: each replica trains on half of every global batch."""
    batches = make_batches()
    want = train_single(batches)

    def run(comm):
        grid = make_grid(comm, 2)
        half = BATCH // grid.dp
        shards = [
            (x[grid.replica * half : (grid.replica + 1) * half], y[grid.replica * half : (grid.replica + 1) * half])
            for x, y in batches
        ]
        return train_pipeline(grid.pp_comm, shards, sched, 3, grid.dp_comm)[0]

    results = simulate_f64(4, run)
    for r, got in enumerate(results):
        assert_matches(got, want, f"{sched}, rank {r}: ")


def test_one_f_one_b_holds_fewer_activations_than_gpipe():
    p, m = 4, 8
    batches = make_batches(1)
    peaks = {
        name: simulate_f64(p, lambda comm, n=name: train_pipeline(comm, batches, n, m)[1].peak_stashed)
        for name in SCHEDULES
    }
    assert peaks["gpipe"] == [m] * p
    assert peaks["1f1b"] == [p - s for s in range(p)]
    assert max(peaks["1f1b"]) < min(peaks["gpipe"])


def test_events_are_recorded_and_gathered(tmp_path):
    p, m = 3, 4
    batches = make_batches(1)

    def run(comm):
        pipe = train_pipeline(comm, batches, "1f1b", m)[1]
        return pipe.events, pipe.gather_events()

    results = simulate_f64(p, run)
    gathered = results[0][1]
    assert all(r[1] is None for r in results[1:])
    assert len(gathered) == 2 * m * p
    for s, (own, _) in enumerate(results):
        assert [(e.kind, e.micro) for e in own] == one_f_one_b(m, p, s)  # in schedule order
        assert all(0 <= e.start <= e.end for e in own)
        assert all(a.end <= b.start for a, b in zip(own, own[1:]))  # one op at a time
    by = {(e.stage, e.micro, e.kind): e for e in gathered}
    for s in range(1, p):
        for i in range(m):  # a stage's forward starts after the previous stage's ended (message in between)
            # clocks aligned by a barrier: the ranks leave it within a few ms of each other on a busy machine
            assert by[(s, i, FORWARD)].start >= by[(s - 1, i, FORWARD)].end - 2e-2
    assert 0 <= bubble_fraction(gathered) < 1
    plot_schedule(gathered, str(tmp_path / "schedule.png"), title="1F1B")
    assert (tmp_path / "schedule.png").stat().st_size > 1000


def test_clear_errors():
    stage = make_model()

    def run(comm):
        pipe = Pipeline(stage, F.cross_entropy, "gpipe", 20, comm)
        x, y = make_batches(1)[0]
        pipe.train_step(x, y)

    with pytest.raises(ValueError, match="fewer than micro_batches=20"):
        simulate_f64(1, run)
    with pytest.raises(ValueError, match="needs a loss_fn"):
        simulate_f64(1, lambda comm: Pipeline(stage, None, comm=comm))
    with pytest.raises(ValueError, match="first stage needs the inputs"):
        simulate_f64(1, lambda comm: Pipeline(stage, F.cross_entropy, comm=comm).train_step(None, np.zeros(4, int)))
    with pytest.raises(ValueError, match="pp must divide the size"):
        simulate_f64(3, lambda comm: make_grid(comm, 2))
    with pytest.raises(TypeError, match="expected an nn.Sequential"):
        split_sequential(nn.Linear(2, 2), 2, 0)


def test_simulated_split_groups_ranks_and_isolates_messages():
    def run(comm):
        rank = comm.Get_rank()
        sub = comm.Split(rank % 2, -rank)  # evens and odds, ranked in reverse
        me, size = sub.Get_rank(), sub.Get_size()
        sub.Barrier()
        # a ring inside each group; the status names the sender by its rank in the group
        out, got, status = np.array([rank], np.int64), np.zeros(1, np.int64), Status()
        sub.Sendrecv(out, (me + 1) % size, 5, got, (me - 1) % size, 5, status)
        # same tag on the parent communicator does not match the group's messages
        parent = np.zeros(1, np.int64)
        comm.Sendrecv(out, (rank + 1) % comm.Get_size(), 5, parent, (rank - 1) % comm.Get_size(), 5)
        return me, size, int(got[0]), status.Get_source(), int(parent[0])

    res = collectives.simulate(5, run)
    # evens 0, 2, 4 ranked by key -rank: 4 -> 0, 2 -> 1, 0 -> 2; odds: 3 -> 0, 1 -> 1
    assert [r[:2] for r in res] == [(2, 3), (1, 2), (1, 3), (0, 2), (0, 3)]
    group_of = {0: [4, 2, 0], 1: [3, 1]}
    for rank, (me, size, got, source, parent) in enumerate(res):
        members = group_of[rank % 2]
        assert got == members[(me - 1) % size] and source == (me - 1) % size
        assert parent == (rank - 1) % 5
