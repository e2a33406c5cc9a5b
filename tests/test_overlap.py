"""Overlap (DistributedOptimizer(overlap=True)): bucket allreduces start during backward, same bits as without."""

from __future__ import annotations

import numpy as np
import pytest
from helpers.overlap import make_model, run

import collectives
import minidl


@pytest.mark.parametrize("p", [2, 3, 5])
@pytest.mark.parametrize("fusion_bytes", [0, 200, 64 << 20])
def test_overlap_is_bitwise_the_same(p, fusion_bytes):
    plain = collectives.simulate(p, run, False, fusion_bytes)
    over = collectives.simulate(p, run, True, fusion_bytes)
    for (a, _, _), (b, launched, buckets) in zip(plain, over):
        for name in a:
            assert np.array_equal(a[name], b[name]), name
        assert all(n == buckets for n in launched), "every bucket should start during backward"


def test_overlap_with_accumulation_and_other_algorithms():
    for algorithm in ("tree", "rabenseifner"):
        plain = collectives.simulate(3, run, False, 200, 2, algorithm)
        over = collectives.simulate(3, run, True, 200, 2, algorithm)
        for (a, _, _), (b, _, _) in zip(plain, over):
            for name in a:
                assert np.array_equal(a[name], b[name]), (algorithm, name)


def test_hooks_fire_once_after_the_last_gradient():
    model = make_model()
    seen = []
    for name, p in model.named_parameters():
        p.register_post_accumulate_grad_hook(lambda t, n=name: seen.append((n, t.grad.copy())))
    x = minidl.tensor(np.random.default_rng(0).standard_normal((2, 6)))
    (model(x).sum() + 2 * model(x).sum()).backward()  # every parameter used twice
    names = [n for n, _ in seen]
    assert sorted(names) == sorted(n for n, _ in model.named_parameters())  # each once
    layers = [int(n.split(".")[0]) for n in names]
    assert layers == sorted(layers, reverse=True)  # the last layer's gradients are final first
    for name, grad in seen:
        assert np.array_equal(grad, dict(model.named_parameters())[name].grad)  # final when the hook ran
