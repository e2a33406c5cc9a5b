"""Learning-rate schedules: against their closed forms and torch.optim.lr_scheduler."""

import math

import numpy as np
import pytest

from minidl import optim
from minidl.nn import Parameter
from minidl.optim import lr_scheduler as sched

EPOCHS = 25


def make_opt(lrs=(0.1,)):
    return optim.SGD([{"params": [Parameter(np.zeros(2))], "lr": lr} for lr in lrs], lr=lrs[0], momentum=0.9)


def trace(scheduler, opt, steps=EPOCHS):
    """Learning rates in force at t = 0 .. steps-1 (one list per group)."""
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in opt.param_groups])
        assert scheduler.get_last_lr() == out[-1]
        opt.step()
        scheduler.step()
    return np.array(out)


def torch_trace(torch, make_sched, lrs=(0.1,), steps=EPOCHS):
    params = [torch.nn.Parameter(torch.zeros(2)) for _ in lrs]
    opt = torch.optim.SGD([{"params": [p], "lr": lr} for p, lr in zip(params, lrs)], lr=lrs[0], momentum=0.9)
    s = make_sched(opt)
    out = []
    for _ in range(steps):
        out.append([g["lr"] for g in opt.param_groups])
        opt.step()
        s.step()
    return np.array(out)


LRS = (0.1, 1.0)
CASES = [
    (
        "StepLR",
        lambda o: sched.StepLR(o, step_size=4, gamma=0.5),
        lambda t, o: t.optim.lr_scheduler.StepLR(o, step_size=4, gamma=0.5),
    ),
    (
        "MultiStepLR",
        lambda o: sched.MultiStepLR(o, [3, 10, 11], gamma=0.3),
        lambda t, o: t.optim.lr_scheduler.MultiStepLR(o, [3, 10, 11], gamma=0.3),
    ),
    (
        "ExponentialLR",
        lambda o: sched.ExponentialLR(o, gamma=0.9),
        lambda t, o: t.optim.lr_scheduler.ExponentialLR(o, gamma=0.9),
    ),
    (
        "DelayedExponentialLR",
        lambda o: sched.DelayedExponentialLR(o, gamma=0.5, delay=4),
        lambda t, o: t.optim.lr_scheduler.LambdaLR(o, lambda e: 0.5 ** max(0, e - 4 + 1)),
    ),
    (
        "LinearWarmup",
        lambda o: sched.LinearWarmup(o, warmup_steps=5, start_factor=0.25),
        lambda t, o: t.optim.lr_scheduler.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=5),
    ),
    (
        "CosineAnnealingLR",
        lambda o: sched.CosineAnnealingLR(o, T_max=EPOCHS - 1, eta_min=1e-3),
        lambda t, o: t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=EPOCHS - 1, eta_min=1e-3),
    ),
    (
        "warmup_cosine",
        lambda o: sched.warmup_cosine(o, 5, EPOCHS - 1, start_factor=0.1),
        lambda t, o: t.optim.lr_scheduler.SequentialLR(
            o,
            [
                t.optim.lr_scheduler.LinearLR(o, start_factor=0.1, total_iters=5),
                t.optim.lr_scheduler.CosineAnnealingLR(o, T_max=EPOCHS - 1 - 5),
            ],
            milestones=[5],
        ),
    ),
]


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch's SequentialLR warns about its own internals
@pytest.mark.parametrize("name, ours, theirs", CASES, ids=[c[0] for c in CASES])
def test_schedule_matches_torch(name, ours, theirs):
    torch = pytest.importorskip("torch")
    opt = make_opt(LRS)
    got = trace(ours(opt), opt)
    want = torch_trace(torch, lambda o: theirs(torch, o), LRS)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-15)


def test_closed_forms():
    lr = 0.1
    opt = make_opt((lr,))
    got = trace(sched.DelayedExponentialLR(opt, gamma=0.5, delay=4), opt, 8)[:, 0]
    np.testing.assert_allclose(got, [lr] * 4 + [lr / 2, lr / 4, lr / 8, lr / 16])  # Zaremba's small model

    opt = make_opt((lr,))
    got = trace(sched.LinearWarmup(opt, warmup_steps=4, start_factor=0.2), opt, 7)[:, 0]
    np.testing.assert_allclose(got, lr * np.array([0.2, 0.4, 0.6, 0.8, 1.0, 1.0, 1.0]))

    opt = make_opt((lr,))
    T = 8
    got = trace(sched.CosineAnnealingLR(opt, T_max=T), opt, T + 3)[:, 0]
    want = [lr * (1 + math.cos(math.pi * min(t, T) / T)) / 2 for t in range(T + 3)]
    np.testing.assert_allclose(got, want, atol=1e-15)
    assert got[-1] == 0.0  # stays at eta_min after T_max

    opt = make_opt((lr,))
    got = trace(sched.warmup_cosine(opt, warmup_steps=3, total_steps=7, start_factor=0.0), opt, 9)[:, 0]
    warm = [0.0, lr / 3, 2 * lr / 3]
    cos = [lr * (1 + math.cos(math.pi * t / 4)) / 2 for t in range(5)]
    np.testing.assert_allclose(got, warm + cos + [0.0], atol=1e-15)


def test_state_dict_resumes_the_schedule():
    opt = make_opt(LRS)
    s = sched.warmup_cosine(opt, 3, 20)
    for _ in range(7):
        s.step()
    state, opt_state = s.state_dict(), opt.state_dict()
    after = [s.step() or s.get_last_lr() for _ in range(5)]

    opt2 = make_opt(LRS)
    s2 = sched.warmup_cosine(opt2, 3, 20)
    opt2.load_state_dict(opt_state)
    s2.load_state_dict(state)
    assert s2.last_epoch == 7 and s2.get_last_lr() == state["_last_lr"]
    assert [s2.step() or s2.get_last_lr() for _ in range(5)] == after
    with pytest.raises(ValueError, match="0 schedulers saved, 2 here"):
        s2.load_state_dict({"last_epoch": 3})
    with pytest.raises(KeyError, match="unexpected keys"):
        sched.StepLR(opt2, 2).load_state_dict({"bogus": 1})


def test_several_schedulers_share_the_initial_lr_and_bad_arguments_raise():
    opt = make_opt((0.1,))
    sched.StepLR(opt, 2, gamma=0.5)
    assert opt.param_groups[0]["initial_lr"] == 0.1
    assert sched.ExponentialLR(opt, 0.9).base_lrs == [0.1]
    with pytest.raises(ValueError, match="step_size"):
        sched.StepLR(opt, 0)
    with pytest.raises(ValueError, match="warmup_steps"):
        sched.LinearWarmup(opt, 0)
    with pytest.raises(ValueError, match="milestones"):
        sched.SequentialLR(opt, [sched.StepLR(opt, 1)], [3])
    with pytest.raises(ValueError, match="total_steps"):
        sched.warmup_cosine(opt, 5, 5)
    with pytest.raises(TypeError, match="needs an Optimizer"):
        sched.StepLR(object(), 1)
