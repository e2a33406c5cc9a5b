"""Ranks at different optimizer steps end with the same clear error on every rank (issue 27, failures 1 and 2).

On simulated ranks, without any communication timeout: before lockstep.py each of these cases left a rank
waiting for ever (the simulated world then reports a deadlock naming message tags, not steps). The
same cases under mpiexec are in tests/mpi/test_lockstep_mpi.py and tests/test_lockstep_cli.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
from minidl import nn, optim
from minidl.distributed.lockstep import WHY, StepMismatchError

collectives = pytest.importorskip("collectives")


def on_every_rank(P, fn):
    """fn(comm) on P simulated ranks; what each rank raised (type name, message), or ("ok", its result)."""

    def wrapped(comm):
        try:
            return ("ok", fn(comm))
        except Exception as e:  # noqa: BLE001 - the test inspects every rank's error
            return (type(e).__name__, str(e))

    return collectives.simulate(P, wrapped, timeout=60)


def train(model, opt, steps):
    rng = np.random.default_rng(0)
    for _ in range(steps):
        opt.zero_grad()
        (model(minidl.tensor(rng.standard_normal((3, 4)))) ** 2).mean().backward()
        opt.step()


def setup(comm, **options):
    dist.init(comm, timeout=0)
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
    return model, dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), **options)


def assert_every_rank_names(results, *texts):
    assert all("MismatchError" in kind for kind, _ in results), results
    messages = {message for _, message in results}
    assert len(messages) == 1, results  # the same words on every rank
    message = messages.pop()
    for text in (*texts, "evaluates alone"):
        assert text in message, message
    return message


@pytest.mark.parametrize("overlap", [False, True])
def test_a_rank_that_stops_early_under_dist_run_fails_every_rank(overlap):
    def main(comm):
        model, opt = setup(comm, overlap=overlap)
        train(model, opt, 3 + comm.Get_rank())

    results = on_every_rank(2, lambda comm: dist.run(main, comm))
    message = assert_every_rank_names(
        results, "ranks [0]: end of run (3 steps done)", "ranks [1]: optimizer step 4 (3 steps done)"
    )
    assert WHY in message


def test_a_rank_that_evaluates_alone_with_a_collective_fails_every_rank():
    def main(comm):
        model, opt = setup(comm)
        train(model, opt, 2)
        if comm.Get_rank() == 0:  # the classic mistake: the metric averaged over the ranks, on one rank
            dist.allreduce(comm, np.ones(1), "ring")
        train(model, opt, 1)

    results = on_every_rank(3, main)
    assert_every_rank_names(
        results,
        "ranks [0]: ring.allreduce with shape (1,) dtype float64, op 'sum' (2 steps done)",
        "ranks [1, 2]: optimizer step 3 (2 steps done)",
    )
    assert [kind for kind, _ in results] == ["MismatchError", "StepMismatchError", "StepMismatchError"]


def test_add_param_group_on_one_rank_after_a_step_fails_every_rank():
    def main(comm):
        dist.init(comm, timeout=0)
        model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
        opt = dist.DistributedOptimizer(optim.SGD(list(model.parameters())[:2], lr=0.1))
        train(model, opt, 1)
        if comm.Get_rank() == 1:
            opt.add_param_group({"params": list(model.parameters())[2:]})
        train(model, opt, 1)

    results = on_every_rank(2, main)
    assert_every_rank_names(results, "ranks [0]: optimizer step 2 (1 step done)", "ranks [1]: add_param_group")


def test_ranks_that_agree_train_as_before_and_end_quietly():
    def main(comm):
        model, opt = setup(comm)
        train(model, opt, 3)
        return model[0].weight.data.copy()

    results = on_every_rank(3, lambda comm: dist.run(main, comm))
    assert all(kind == "ok" for kind, _ in results), results
    np.testing.assert_array_equal(results[0][1], results[2][1])


def test_the_step_agreement_is_the_barrier_that_measure_wait_times():
    def main(comm):
        model, opt = setup(comm, measure_wait=True)
        train(model, opt, 2)
        return opt.timings.total["wait"]

    results = on_every_rank(2, main)
    assert all(kind == "ok" and value > 0 for kind, value in results), results


def test_a_step_mismatch_error_is_a_mismatch_error():
    assert issubclass(StepMismatchError, collectives.MismatchError)


@pytest.mark.parametrize("wrapper", ["zero", "local-sgd"])
def test_zero_and_local_sgd_ranks_at_different_steps_fail_every_rank(wrapper):
    """ZeroOptimizer and LocalSGD agree on the step too: one rank stopping early, under dist.run, is named."""

    def main(comm):
        dist.init(comm, timeout=0)
        minidl.manual_seed(0)
        model = nn.Sequential(nn.Linear(4, 6), nn.Linear(6, 2))
        sgd = optim.SGD(model.parameters(), lr=0.1)
        opt = dist.ZeroOptimizer(sgd, comm=comm) if wrapper == "zero" else dist.LocalSGD(sgd, 1, comm=comm)
        train(model, opt, 3 + comm.Get_rank())

    results = on_every_rank(2, lambda comm: dist.run(main, comm))
    assert_every_rank_names(results, "ranks [0]: end of run (3 steps done)", "ranks [1]: optimizer step 4")
