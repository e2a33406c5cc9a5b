"""The large-batch study's pieces: accumulation gives the big batch's gradient; the recipes' rates."""

from __future__ import annotations

import pathlib
import sys

import numpy as np
import pytest

import minidl
from minidl import nn

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from large_batch_study import Setting, accumulate, images, rate, train  # noqa: E402


def test_accumulated_micro_batches_give_the_global_batch_gradient():
    data = images(32, n_test=8, size=8)
    grads = []
    for micro in (32, 8, 4):  # one pass of 32 = 4 passes of 8 = 8 passes of 4 (no batch norm: nothing per pass)
        minidl.manual_seed(0)
        net = nn.resnet(8, 5, 1, 2, norm=None)
        loss = accumulate(net, data, np.arange(32), micro)
        grads.append((loss, np.concatenate([p.grad.ravel() for p in net.parameters()])))
    for loss, g in grads[1:]:
        assert loss == pytest.approx(grads[0][0], rel=1e-5)
        np.testing.assert_allclose(g, grads[0][1], rtol=2e-4, atol=1e-6)


def test_recipes_rates():
    steps, per_epoch = 40, 10
    base = Setting(recipe="sgd", global_batch=512)
    linear = Setting(recipe="linear", global_batch=512)
    assert rate(base, 0, steps, per_epoch) == pytest.approx(0.1)  # the base rate, whatever the batch
    assert rate(linear, 0, steps, per_epoch) == pytest.approx(0.1)  # the warmup starts from the base rate
    cos = (1 + np.cos(np.pi * 10 / 40)) / 2
    assert rate(linear, 10, steps, per_epoch) == pytest.approx(0.8 * cos)  # 8 x base after one epoch
    at_base = Setting(recipe="linear", global_batch=64)
    assert [rate(at_base, t, steps, per_epoch) for t in range(5)] == [rate(base, t, steps, per_epoch) for t in range(5)]


def test_a_batch_larger_than_the_data_is_refused():
    with pytest.raises(ValueError, match="global batch 128: must be a multiple of 64 and <= the training set"):
        train(Setting(global_batch=128), images(64, n_test=8, size=8))
