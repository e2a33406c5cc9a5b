"""Mixed precision emulated: fp16/bf16 rounding, underflow without loss scaling, GradScaler's rules."""

from __future__ import annotations

import numpy as np
import pytest

import minidl
from minidl import amp, nn


def test_bf16_rounds_to_the_top_16_bits_ties_to_even():
    x = np.array([1.0, 1 + 2**-8, 1 + 2**-7, 1 + 3 * 2**-8, 3.0e38, np.inf, -np.inf], dtype=np.float32)
    got = amp.round_bf16(x)
    # 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1); 1 + 3*2^-8 ties up to 1 + 2^-6
    assert got.tolist()[:4] == [1.0, 1.0, 1 + 2**-7, 1 + 2**-6]
    assert np.isinf(got[5]) and np.isinf(got[6])
    assert np.isnan(amp.round_bf16(np.array([np.nan], np.float32)))[0]
    assert np.all((got.view(np.uint32) & 0xFFFF) == 0)


def test_fp16_range_and_precision():
    x = np.array([1e-8, 7e-8, 1.0 + 1e-4, 70000.0], dtype=np.float32)
    got = amp.round_fp16(x)
    assert got[0] == 0.0 and got[1] > 0  # below the smallest subnormal (6e-8): underflow
    assert got[2] == 1.0  # 11 bits of precision
    assert np.isinf(got[3])  # above 65504


def test_autocast_rounds_outputs_and_gradients_not_the_master_weights():
    w = minidl.tensor(np.full(3, 1 + 2**-12, np.float32), requires_grad=True)
    with amp.autocast("fp16"):
        y = (w * 3.0).sum()
    assert y.data == np.float32(9.0)  # each product rounded (3 + 3*2^-12 is not an fp16 number), then the sum
    assert w.data[0] == np.float32(1 + 2**-12)  # the master weight is untouched
    y.backward()
    assert w.grad.tolist() == [3.0, 3.0, 3.0]


def tiny_gradient(scaler: amp.GradScaler | None) -> np.ndarray:
    """A loss whose gradient (1e-8 per weight) is below fp16's smallest subnormal."""
    w = nn.Parameter(np.ones(4, np.float32))
    with amp.autocast("fp16"):
        loss = (w * 1e-4).sum() * 1e-4
    (scaler.scale(loss) if scaler else loss).backward()
    if scaler:
        scaler.unscale_([w])
    return w.grad


def test_small_gradients_underflow_without_loss_scaling_and_survive_with_it():
    assert np.all(tiny_gradient(None) == 0)
    np.testing.assert_allclose(tiny_gradient(amp.GradScaler()), 1e-8, rtol=1e-2)


def test_grad_scaler_follows_pytorchs_rules():
    s = amp.GradScaler(growth_interval=3)
    assert s.scale_value == 2.0**16
    p = nn.Parameter(np.ones(2, np.float32))
    p.grad = np.array([np.inf, 1.0], np.float32)
    assert not s.unscale_([p])
    s.update()
    assert s.scale_value == 2.0**15 and s.skipped == 1
    for _ in range(3):
        p.grad = np.ones(2, np.float32)
        assert s.unscale_([p])
        s.update()
    assert s.scale_value == 2.0**16  # doubled after growth_interval good steps


def test_a_scale_below_one_is_an_error_not_an_endless_skip():
    s = amp.GradScaler(init_scale=2.0)
    p = nn.Parameter(np.ones(1, np.float32))
    with pytest.raises(amp.LossScaleError, match="fell to 0.5"):
        for _ in range(3):
            p.grad = np.array([np.nan], np.float32)
            s.unscale_([p])
            s.update()
