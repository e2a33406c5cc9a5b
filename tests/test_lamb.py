"""LAMB (You et al., "Large Batch Optimization for Deep Learning: Training BERT in 76 minutes", 2020) against a
NumPy transcription of the paper's Algorithm 2 (PyTorch has no LAMB), and its layer-wise property."""

from __future__ import annotations

import numpy as np
import pytest

from minidl import optim
from minidl.nn import Parameter
from tests.test_optim import close, make_problem, run_minidl


def lamb_reference(init, grads, lr, betas, eps, weight_decay):
    """Algorithm 2, one layer at a time, written out step by step in float64."""
    (b1, b2), ws = betas, [w.copy() for w in init]
    ms, vs = [np.zeros_like(w) for w in ws], [np.zeros_like(w) for w in ws]
    for t, gs in enumerate(grads, start=1):
        for i, g in enumerate(gs):
            ms[i] = b1 * ms[i] + (1 - b1) * g
            vs[i] = b2 * vs[i] + (1 - b2) * g * g
            m_hat, v_hat = ms[i] / (1 - b1**t), vs[i] / (1 - b2**t)
            u = m_hat / (np.sqrt(v_hat) + eps) + weight_decay * ws[i]
            wn, un = np.sqrt(np.sum(ws[i] ** 2)), np.sqrt(np.sum(u**2))
            ratio = wn / un if wn > 0 and un > 0 else 1.0
            ws[i] = ws[i] - lr * ratio * u
    return ws


@pytest.mark.parametrize(
    "cfg", [dict(lr=0.01), dict(lr=0.05, weight_decay=0.01), dict(lr=0.02, betas=(0.8, 0.99), eps=1e-8)]
)
def test_lamb_matches_the_papers_algorithm(cfg):
    init, grads = make_problem()
    got, opt = run_minidl(lambda ps: optim.LAMB(ps, **cfg), init, grads)
    full = dict(betas=(0.9, 0.999), eps=1e-6, weight_decay=0.0) | cfg
    close(got, lamb_reference(init, grads, **full))
    assert all(s["step"] == len(grads) for s in opt.state.values())


def test_every_layer_moves_lr_times_its_norm_whatever_its_gradient_scale():
    w = np.random.default_rng(1).standard_normal((4, 4))
    g = np.random.default_rng(2).standard_normal((4, 4))
    steps = []
    for scale in (1e-3, 1.0, 1e3):
        p = Parameter(w.copy())
        p.grad = g * scale
        optim.LAMB([p], lr=0.01, eps=0.0).step()
        steps.append(p.data - w)
    for s in steps:
        np.testing.assert_allclose(np.linalg.norm(s), 0.01 * np.linalg.norm(w), rtol=1e-12)
    np.testing.assert_allclose(steps[0], steps[2], rtol=1e-9)


def test_groups_without_adaptation_take_plain_adam_steps_and_bad_betas_are_named():
    bias = Parameter(np.zeros(3))
    weight = Parameter(np.ones((3, 2)))
    opt = optim.LAMB(optim.exclude_bias_and_norm([weight, bias]), lr=0.1)
    bias.grad, weight.grad = np.array([2.0, -1.0, 0.5]), np.zeros((3, 2))
    opt.step()
    np.testing.assert_allclose(bias.data, -0.1 * np.sign([2.0, -1.0, 0.5]), rtol=1e-5)  # Adam's first step: lr*sign
    with pytest.raises(ValueError, match="invalid betas"):
        optim.LAMB([Parameter(np.ones(2))], betas=(0.9, 1.0))
