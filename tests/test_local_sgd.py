"""Local SGD (parameter averaging every k steps) on the simulated communicator: with k = 1 and plain SGD it
is gradient averaging (exactly, float64); with k > 1 it converges; averaging itself is the mean; errors.

tests/mpi/test_parameter_server_mpi.py runs the k = 1 equivalence under mpiexec.
"""

from __future__ import annotations

import pytest
from helpers.local_sgd import (  # noqa: F401
    STEPS,
    collectives,
    pytestmark,
    run_local_sgd,
)
from helpers.parameter_server import (
    B,
    assert_same_state,
    heldout_loss,
    make_model,
    single_process,
)

import minidl.distributed as dist
from minidl import optim


@pytest.mark.parametrize("P", [2, 3, 4])
def test_k1_is_gradient_averaging(P):
    """(1/P) sum_r (w - lr g_r) = w - lr (1/P) sum_r g_r: the same steps as one process with batch P*b."""
    one_process = single_process(P, STEPS, opt="plain")
    grad_avg = collectives.simulate(P, run_local_sgd, 1, STEPS, 0.2, B, True)
    local = collectives.simulate(P, run_local_sgd, 1)
    for (state, opt), (reference, _) in zip(local, grad_avg):
        assert opt.averages == STEPS
        assert_same_state(state, reference)
        assert_same_state(state, one_process)


def test_k_greater_than_1_converges_and_communicates_k_times_less():
    P, k, steps = 3, 4, 60
    out = collectives.simulate(P, run_local_sgd, k, steps, 0.4, 16)
    final = out[0][0]
    for state, opt in out:
        assert_same_state(state, final, rtol=0.0)  # every replica holds the final average
        assert opt.averages == steps // k
    # 1.15 nats at the start; 0.166 after 60 steps (gradient averaging, k = 1: 0.163)
    assert heldout_loss(final) < 0.2 < heldout_loss(make_model().state_dict())


def test_average_parameters_is_the_mean():
    def fn(comm):
        dist.init(comm)
        model = make_model()
        for p in model.parameters():
            p.data += comm.Get_rank()  # replica r is the initial model + r
        dist.average_parameters(model.parameters())
        return model.state_dict()

    P = 4
    want = {k: v + (P - 1) / 2 for k, v in make_model().state_dict().items()}
    for state in collectives.simulate(P, fn):
        assert_same_state(state, want, rtol=1e-15)


def test_errors():
    def fn(comm):
        dist.init(comm)
        model = make_model()
        with pytest.raises(ValueError, match="average_every"):
            dist.LocalSGD(optim.SGD(model.parameters(), lr=0.1), average_every=0)
        with pytest.raises(TypeError, match="wraps a minidl optimizer"):
            dist.LocalSGD(model.parameters())
        opt = dist.LocalSGD(optim.SGD(model.parameters(), lr=0.1), average_every=2)
        assert opt.param_groups[0]["lr"] == 0.1 and not opt.will_average  # the wrapped optimizer's
        return True

    assert collectives.simulate(2, fn) == [True, True]
