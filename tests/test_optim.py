"""Optimizers: each update against its formula written out here, and against torch.optim on the same gradients."""

import math

import numpy as np
import pytest

from minidl import optim
from minidl.nn import Parameter

SHAPES = [(3, 4), (5,), ()]
STEPS = 6


def make_problem(seed=0, dtype=np.float64, steps=STEPS):
    """Initial values of a few parameters and a fixed sequence of gradients for them."""
    rng = np.random.default_rng(seed)
    init = [rng.standard_normal(s).astype(dtype) for s in SHAPES]
    grads = [[rng.standard_normal(s).astype(dtype) for s in SHAPES] for _ in range(steps)]
    return init, grads


def run_minidl(make_opt, init, grads, skip=None):
    """Step a minidl optimizer through ``grads``; ``skip`` = (step, index) of a gradient left as None."""
    params = [Parameter(x.copy()) for x in init]
    opt = make_opt(params)
    for t, gs in enumerate(grads):
        for i, (p, g) in enumerate(zip(params, gs)):
            p.grad = None if skip == (t, i) else g.copy()
        opt.step()
    return [p.data for p in params], opt


def run_torch(torch, make_opt, init, grads, skip=None):
    params = [torch.nn.Parameter(torch.tensor(x.copy())) for x in init]
    opt = make_opt(params)
    for t, gs in enumerate(grads):
        for i, (p, g) in enumerate(zip(params, gs)):
            p.grad = None if skip == (t, i) else torch.tensor(g.copy())
        opt.step()
    return [p.detach().numpy() for p in params]


# ----------------------------------------------------------------------------- formulas, written out
def sgd_reference(init, grads, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
    ps = [x.copy() for x in init]
    bufs = [None] * len(ps)
    for gs in grads:
        for i, g in enumerate(gs):
            d = g + weight_decay * ps[i]
            if momentum:
                bufs[i] = d.copy() if bufs[i] is None else momentum * bufs[i] + (1 - dampening) * d
                d = d + momentum * bufs[i] if nesterov else bufs[i]
            ps[i] = ps[i] - lr * d
    return ps


def adam_reference(init, grads, lr, betas, eps, weight_decay, decoupled, amsgrad=False):
    b1, b2 = betas
    ps = [x.copy() for x in init]
    m = [np.zeros_like(x) for x in init]
    v = [np.zeros_like(x) for x in init]
    vmax = [np.zeros_like(x) for x in init]
    for t, gs in enumerate(grads, start=1):
        for i, g in enumerate(gs):
            if decoupled:
                ps[i] = ps[i] * (1 - lr * weight_decay)
            else:
                g = g + weight_decay * ps[i]
            m[i] = b1 * m[i] + (1 - b1) * g
            v[i] = b2 * v[i] + (1 - b2) * g * g
            vmax[i] = np.maximum(vmax[i], v[i])
            m_hat = m[i] / (1 - b1**t)
            v_hat = (vmax[i] if amsgrad else v[i]) / (1 - b2**t)
            ps[i] = ps[i] - lr * m_hat / (np.sqrt(v_hat) + eps)
    return ps


def lars_reference(init, grads, lr, momentum, weight_decay, eta, eps):
    ps = [x.copy() for x in init]
    v = [np.zeros_like(x) for x in init]
    for gs in grads:
        for i, g in enumerate(gs):
            wn, gn = np.sqrt(np.sum(ps[i] ** 2)), np.sqrt(np.sum(g**2))
            local = eta * wn / (gn + weight_decay * wn + eps) if wn > 0 and gn > 0 else 1.0
            v[i] = momentum * v[i] + lr * local * (g + weight_decay * ps[i])
            ps[i] = ps[i] - v[i]
    return ps


SGD_CONFIGS = [
    dict(lr=0.1),
    dict(lr=0.1, weight_decay=0.01),
    dict(lr=0.05, momentum=0.9),
    dict(lr=0.05, momentum=0.9, dampening=0.3, weight_decay=1e-3),
    dict(lr=0.05, momentum=0.9, nesterov=True),
    dict(lr=0.05, momentum=0.8, nesterov=True, weight_decay=0.1),
]
ADAM_CONFIGS = [
    dict(lr=1e-2),
    dict(lr=1e-2, betas=(0.8, 0.99), eps=1e-6),
    dict(lr=1e-2, weight_decay=0.1),
    dict(lr=1e-2, weight_decay=0.1, amsgrad=True),
]


def close(actual, expected, rtol=1e-11, atol=1e-13):
    for a, e in zip(actual, expected):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=atol)


@pytest.mark.parametrize("cfg", SGD_CONFIGS)
def test_sgd_matches_formula(cfg):
    init, grads = make_problem()
    got, _ = run_minidl(lambda ps: optim.SGD(ps, **cfg), init, grads)
    close(got, sgd_reference(init, grads, **cfg))


@pytest.mark.parametrize("cfg", ADAM_CONFIGS)
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_adam_matches_formula(cls, cfg):
    init, grads = make_problem()
    got, opt = run_minidl(lambda ps: getattr(optim, cls)(ps, **cfg), init, grads)
    full = dict(betas=(0.9, 0.999), eps=1e-8, weight_decay=0.01 if cls == "AdamW" else 0.0)
    full.update(cfg)
    close(got, adam_reference(init, grads, decoupled=cls == "AdamW", **full))
    assert all(s["step"] == STEPS for s in opt.state.values())


@pytest.mark.parametrize("weight_decay", [0.0, 5e-4])
def test_lars_matches_formula(weight_decay):
    init, grads = make_problem()
    cfg = dict(lr=0.5, momentum=0.9, weight_decay=weight_decay)
    got, _ = run_minidl(lambda ps: optim.LARS(ps, trust_coefficient=0.02, **cfg), init, grads)
    close(got, lars_reference(init, grads, eta=0.02, eps=1e-8, **cfg))


def test_lars_layerwise_rate_is_scale_free_and_excluded_groups_are_plain_momentum():
    # Scaling one layer's gradient by 1000 leaves its first LARS step unchanged (||w||/||g|| adapts).
    w = np.random.default_rng(1).standard_normal((4, 4))
    g = np.random.default_rng(2).standard_normal((4, 4))
    steps = []
    for scale in (1.0, 1000.0):
        p = Parameter(w.copy())
        p.grad = g * scale
        optim.LARS([p], lr=1.0, trust_coefficient=0.01, eps=0.0).step()
        steps.append(p.data - w)
    np.testing.assert_allclose(steps[0], steps[1], rtol=1e-12)
    np.testing.assert_allclose(np.linalg.norm(steps[0]), 0.01 * np.linalg.norm(w), rtol=1e-12)

    weight, bias = Parameter(np.ones((3, 2))), Parameter(np.zeros(3))
    groups = optim.exclude_bias_and_norm([weight, bias])
    assert [len(g["params"]) for g in groups] == [1, 1] and groups[1]["params"][0] is bias
    opt = optim.LARS(groups, lr=0.1, momentum=0.0, weight_decay=0.5)
    assert opt.param_groups[1]["weight_decay"] == 0.0 and opt.param_groups[1]["adapt"] is False
    bias.grad = np.full(3, 2.0)
    weight.grad = np.zeros((3, 2))
    opt.step()
    np.testing.assert_allclose(bias.data, -0.2 * np.ones(3))  # plain SGD: no trust ratio, no decay


def test_none_grads_are_skipped_and_state_is_lazy():
    init, grads = make_problem()
    params = [Parameter(x.copy()) for x in init]
    opt = optim.Adam(params, lr=0.1)
    params[0].grad = grads[0][0]
    opt.step()
    assert params[0] in opt.state and params[1] not in opt.state
    np.testing.assert_array_equal(params[1].data, init[1])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("name", ["SGD", "Adam", "AdamW", "LARS"])
def test_dtype_is_preserved_and_grad_untouched(name, dtype):
    init, grads = make_problem(dtype=dtype, steps=2)
    kwargs = dict(lr=0.1, weight_decay=0.01) | (dict(momentum=0.9) if name in ("SGD", "LARS") else {})
    params = [Parameter(x.copy(), dtype=dtype) for x in init]
    opt = getattr(optim, name)(params, **kwargs)
    for gs in grads:
        for p, g in zip(params, gs):
            p.grad = g.copy()
        opt.step()
    for p, g in zip(params, grads[-1]):
        assert p.data.dtype == dtype
        np.testing.assert_array_equal(p.grad, g)  # weight decay must not write into p.grad
    assert all(v.dtype == dtype for s in opt.state.values() for v in s.values() if isinstance(v, np.ndarray))


def test_updates_are_in_place_on_the_same_array():
    p = Parameter(np.ones(3))
    data = p.data
    p.grad = np.ones(3)
    optim.SGD([p], lr=0.5, momentum=0.9).step()
    assert p.data is data
    np.testing.assert_allclose(data, 0.5)


# ----------------------------------------------------------------------------- against torch.optim
@pytest.mark.parametrize("cfg", SGD_CONFIGS)
def test_sgd_matches_torch(cfg):
    torch = pytest.importorskip("torch")
    init, grads = make_problem(seed=3)
    skip = (2, 1)  # one gradient missing mid-run: both must skip that parameter for that step
    got, _ = run_minidl(lambda ps: optim.SGD(ps, **cfg), init, grads, skip)
    want = run_torch(torch, lambda ps: torch.optim.SGD(ps, **cfg), init, grads, skip)
    close(got, want)


@pytest.mark.parametrize("cfg", ADAM_CONFIGS)
@pytest.mark.parametrize("cls", ["Adam", "AdamW"])
def test_adam_matches_torch(cls, cfg):
    torch = pytest.importorskip("torch")
    init, grads = make_problem(seed=4)
    skip = (3, 0)
    got, _ = run_minidl(lambda ps: getattr(optim, cls)(ps, **cfg), init, grads, skip)
    want = run_torch(torch, lambda ps: getattr(torch.optim, cls)(ps, foreach=False, **cfg), init, grads, skip)
    close(got, want)


def test_float32_matches_torch_float32():
    torch = pytest.importorskip("torch")
    init, grads = make_problem(seed=5, dtype=np.float32)
    for ours, theirs, cfg in [
        (optim.SGD, torch.optim.SGD, dict(lr=0.1, momentum=0.9, nesterov=True, weight_decay=1e-3)),
        (optim.Adam, torch.optim.Adam, dict(lr=1e-2, weight_decay=1e-2)),
    ]:
        got, _ = run_minidl(lambda ps, ours=ours, cfg=cfg: ours(ps, **cfg), init, grads)
        want = run_torch(torch, lambda ps, theirs=theirs, cfg=cfg: theirs(ps, **cfg), init, grads)
        for a, e in zip(got, want):
            assert a.dtype == np.float32
            np.testing.assert_allclose(a, e, rtol=2e-6, atol=2e-6)


def test_param_groups_with_own_hyperparameters_match_torch():
    torch = pytest.importorskip("torch")
    init, grads = make_problem(seed=6)

    def groups(ps):
        return [{"params": ps[:1], "lr": 0.01, "momentum": 0.5}, {"params": ps[1:]}]

    got, opt = run_minidl(lambda ps: optim.SGD(groups(ps), lr=0.1, momentum=0.9), init, grads)
    want = run_torch(torch, lambda ps: torch.optim.SGD(groups(ps), lr=0.1, momentum=0.9), init, grads)
    close(got, want)
    assert [g["lr"] for g in opt.param_groups] == [0.01, 0.1]


# ----------------------------------------------------------------------------- zero_grad, closure, errors
def test_zero_grad_and_closure():
    p = Parameter(np.ones(2))
    opt = optim.SGD([p], lr=0.1)
    p.grad = np.ones(2)
    grad = p.grad
    opt.zero_grad(set_to_none=False)
    assert p.grad is grad and not grad.any()
    opt.zero_grad()
    assert p.grad is None

    def closure():
        p.grad = np.full(2, 3.0)
        return 42.0

    assert opt.step(closure) == 42.0
    np.testing.assert_allclose(p.data, 1 - 0.1 * 3.0)


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: optim.SGD([], lr=0.1), "empty parameter list"),
        (lambda p: optim.SGD([p], lr=-0.1), "invalid lr"),
        (lambda p: optim.SGD([p], lr=float("nan")), "invalid lr"),
        (lambda p: optim.SGD([p]), "didn't specify a value of 'lr'"),
        (lambda p: optim.SGD([p], lr=0.1, momentum=-1), "invalid momentum"),
        (lambda p: optim.SGD([p], lr=0.1, nesterov=True), "Nesterov"),
        (lambda p: optim.SGD([p, p], lr=0.1), "more than once"),
        (lambda p: optim.SGD([{"params": [p]}, {"params": [p]}], lr=0.1), "more than once"),
        (lambda p: optim.SGD(p, lr=0.1), "single Tensor"),
        (lambda p: optim.SGD([np.zeros(2)], lr=0.1), "can only optimize Tensors"),
        (lambda p: optim.Adam([p], betas=(0.9, 1.0)), "invalid betas"),
        (lambda p: optim.Adam([p], eps=-1.0), "invalid eps"),
        (lambda p: optim.LARS([p], lr=0.1, trust_coefficient=-1), "invalid trust_coefficient"),
    ],
)
def test_bad_construction_raises_clear_errors(make, match):
    with pytest.raises((ValueError, TypeError), match=match):
        make(Parameter(np.zeros(2)))


def test_grad_of_wrong_shape_is_an_error():
    p = Parameter(np.zeros((2, 3)))
    p.grad = np.zeros(3)
    with pytest.raises(ValueError, match=r"shape \(2, 3\) has a gradient of shape \(3,\)"):
        optim.Adam([p]).step()


# ----------------------------------------------------------------------------- state_dict
def test_state_dict_layout_matches_torch():
    torch = pytest.importorskip("torch")
    init, grads = make_problem(seed=7, steps=2)
    _, opt = run_minidl(lambda ps: optim.Adam(ps, lr=0.01, amsgrad=True), init, grads)
    tparams = [torch.nn.Parameter(torch.tensor(x)) for x in init]
    topt = torch.optim.Adam(tparams, lr=0.01, amsgrad=True)
    for gs in grads:
        for p, g in zip(tparams, gs):
            p.grad = torch.tensor(g)
        topt.step()
    ours, theirs = opt.state_dict(), topt.state_dict()
    assert set(ours["state"]) == set(theirs["state"]) == {0, 1, 2}
    for i in ours["state"]:
        assert set(ours["state"][i]) == set(theirs["state"][i])
        assert ours["state"][i]["step"] == int(theirs["state"][i]["step"])
        for k in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            np.testing.assert_allclose(ours["state"][i][k], theirs["state"][i][k].numpy(), rtol=1e-12, atol=1e-15)
    assert ours["param_groups"][0]["params"] == theirs["param_groups"][0]["params"] == [0, 1, 2]
    for k in ("lr", "betas", "eps", "weight_decay", "amsgrad"):
        assert ours["param_groups"][0][k] == theirs["param_groups"][0][k]


def test_load_state_dict_errors_name_the_problem():
    init, grads = make_problem(steps=1)
    _, opt = run_minidl(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), init, grads)
    sd = opt.state_dict()

    other = optim.SGD([Parameter(np.zeros(s)) for s in SHAPES[:2]], lr=0.1)
    with pytest.raises(ValueError, match="parameter group 0 has 3 parameters in the checkpoint, 2 here"):
        other.load_state_dict(sd)
    three_groups = optim.SGD([{"params": [Parameter(np.zeros(s))]} for s in SHAPES], lr=0.1)
    with pytest.raises(ValueError, match="checkpoint has 1 parameter groups, this optimizer has 3"):
        three_groups.load_state_dict(sd)
    swapped = optim.SGD([Parameter(np.zeros(s)) for s in [(4, 3), (5,), ()]], lr=0.1)
    with pytest.raises(ValueError, match=r"'momentum_buffer' of parameter 0 has shape \(3, 4\).*shape \(4, 3\)"):
        swapped.load_state_dict(sd)
    with pytest.raises(ValueError, match="'state' and 'param_groups'"):
        swapped.load_state_dict({"state": {}})


def test_load_state_dict_copies_and_restores_hyperparameters():
    init, grads = make_problem(steps=2)
    _, opt = run_minidl(lambda ps: optim.SGD(ps, lr=0.1, momentum=0.9), init, grads)
    sd = opt.state_dict()
    fresh = optim.SGD([Parameter(x) for x in init], lr=0.5)
    fresh.load_state_dict(sd)
    assert fresh.param_groups[0]["lr"] == 0.1 and fresh.param_groups[0]["momentum"] == 0.9
    buf = next(iter(fresh.state.values()))["momentum_buffer"]
    assert not np.shares_memory(buf, sd["state"][0]["momentum_buffer"])
    assert math.isclose(float(np.abs(buf).sum()), float(np.abs(sd["state"][0]["momentum_buffer"]).sum()))


# ----------------------------------------------------------------------------- clip_grad_norm
@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_matches_torch(norm_type, max_norm):
    torch = pytest.importorskip("torch")
    _, grads = make_problem(seed=8, steps=1)
    params = [Parameter(np.zeros(s)) for s in SHAPES] + [Parameter(np.zeros(2))]  # the last has no grad
    for p, g in zip(params, grads[0]):
        p.grad = g.copy()
    tparams = [torch.nn.Parameter(torch.zeros(s, dtype=torch.float64)) for s in SHAPES]
    for p, g in zip(tparams, grads[0]):
        p.grad = torch.tensor(g.copy())
    total = optim.clip_grad_norm(params, max_norm, norm_type)
    ttotal = torch.nn.utils.clip_grad_norm_(tparams, max_norm, norm_type)
    assert isinstance(total, float)
    assert math.isclose(total, float(ttotal), rel_tol=1e-12)
    for p, tp in zip(params, tparams):
        np.testing.assert_allclose(p.grad, tp.grad.numpy(), rtol=1e-12, atol=1e-15)
    assert params[-1].grad is None


def test_clip_grad_norm_formula_and_edge_cases():
    a, b = Parameter(np.zeros(2)), Parameter(np.zeros((1, 2)))
    a.grad, b.grad = np.array([3.0, 0.0]), np.array([[0.0, 4.0]])  # joint 2-norm 5
    assert optim.clip_grad_norm([a, b], 1.0) == 5.0
    np.testing.assert_allclose(np.concatenate([a.grad, b.grad.ravel()]), np.array([3, 0, 0, 4]) / (5 + 1e-6))
    a.grad = np.array([0.3, 0.4])
    assert math.isclose(optim.clip_grad_norm(a, 10.0), 0.5)  # a single tensor; below the max: unchanged
    np.testing.assert_array_equal(a.grad, [0.3, 0.4])
    assert optim.clip_grad_norm([Parameter(np.zeros(1))], 1.0) == 0.0  # no grads at all
    a.grad = np.array([np.inf, 1.0])
    with pytest.raises(RuntimeError, match="total norm"):
        optim.clip_grad_norm([a], 1.0, error_if_nonfinite=True)
    with pytest.raises(ValueError, match="max_norm"):
        optim.clip_grad_norm([a], -1.0)
    f32 = Parameter(np.ones(4, np.float32))
    f32.grad = np.full(4, 10.0, np.float32)
    optim.clip_grad_norm([f32], 1.0)
    assert f32.grad.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(f32.grad), 1.0, rtol=1e-5)
