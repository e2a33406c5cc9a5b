"""Under mpiexec -n P (P = 2..5): the parameter server with rank 0 (or ranks 0..S-1) serving the other ranks.

Synchronous PS = one process with the combined batch (float64, 1e-8 relative; every rank computes the
reference itself); asynchronous PS converges with its staleness recorded and bounded; local SGD with
k = 1 = gradient averaging. The helpers are the serial tests' (tests/test_parameter_server.py).
"""

import pytest
from helpers.local_sgd import run_local_sgd
from helpers.parameter_server import (
    STEPS,
    assert_same_state,
    heldout_loss,
    make_model,
    run_ps,
    single_process,
)

pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


@pytest.mark.parametrize("S", [1, 2])
@pytest.mark.parametrize("opt", ["sgd", "adam"])
def test_sync_ps_equals_single_process(comm, S, opt):
    P = comm.Get_size()
    if P <= S:
        pytest.skip(f"{S} servers need at least {S + 1} ranks (one worker), got {P}")
    want = single_process(P - S, opt=opt)
    final, own, role = run_ps(comm, S, STEPS, opt)
    assert_same_state(final, want)
    assert_same_state(own if comm.Get_rank() >= S else final, want)
    if comm.Get_rank() < S:
        assert role.rounds == STEPS and role.staleness_max == 0


def test_async_ps_converges_and_records_staleness(comm):
    P = comm.Get_size()
    steps = 100 if P == 2 else 50  # at least 100 updates in all
    final, _, role = run_ps(comm, 1, steps, "plain", asynchronous=True, b=16)
    assert heldout_loss(final) < 0.3 < heldout_loss(make_model().state_dict())
    if comm.Get_rank() == 0:
        assert role.updates == steps * (P - 1) and len(role.staleness) == role.updates
        if P - 1 >= 2:  # all start at version 0: every first gradient but the first applied is stale
            assert role.staleness_max >= 1
        else:  # one worker that pulls after every push is never behind
            assert role.staleness_max == 0


def test_async_ps_staleness_bound(comm):
    P, steps, bound = comm.Get_size(), 9, 1
    _, _, role = run_ps(comm, 1, steps, "plain", asynchronous=True, fetch_every=3, staleness_bound=bound)
    if comm.Get_rank() == 0:
        assert role.staleness_max <= bound
        assert role.rejected >= 1  # a 3rd gradient from one copy would be at least 2 updates old
        assert role.updates == steps * (P - 1)  # refused gradients were recomputed and applied


def test_local_sgd_k1_is_gradient_averaging(comm):
    P = comm.Get_size()
    state, opt = run_local_sgd(comm, 1)
    assert opt.averages == STEPS
    assert_same_state(state, single_process(P, STEPS, opt="plain"))
