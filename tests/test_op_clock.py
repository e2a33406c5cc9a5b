"""benchmarks/op_clock.py: the flops it counts for the GEMM-bound ops of a step, and that it leaves the ops as it
found them."""

from __future__ import annotations

import pathlib
import sys

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn.conv import Conv2dFunction

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from op_clock import OpClock  # noqa: E402


def test_flops_of_a_conv_a_linear_and_an_lstm_step():
    minidl.manual_seed(0)
    x = minidl.tensor(np.random.default_rng(0).standard_normal((2, 3, 6, 6)).astype(np.float32))
    conv, fc = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(4 * 36, 5)
    lstm, seq = nn.LSTM(3, 7), minidl.tensor(np.ones((4, 2, 3), np.float32))
    forward = Conv2dFunction.forward
    with OpClock() as clock:
        y = fc(conv(x).reshape(2, -1))
        out, _ = lstm(seq)
        (F.cross_entropy(y, np.array([0, 1])) + out.sum()).backward()
    assert Conv2dFunction.forward is forward  # restored
    conv_flops = 2.0 * 2 * 4 * 36 * 3 * 9  # 2 N O OH OW C k^2 in the forward; dW in the backward (x needs none)
    assert clock.flops["conv 3x3 3->4 at 6x6"] == 2 * conv_flops
    assert clock.flops["linear [2, 144] -> 5"] == 3 * 2.0 * 2 * 144 * 5  # forward, dx, dW
    T, B, I, H = 4, 2, 3, 7
    forward_lstm = 2.0 * T * B * 4 * H * (I + H)
    backward_lstm = 2.0 * T * B * 4 * H * (I + 2 * H)  # dW_ih, dh and dW_hh (the input needs no gradient)
    assert clock.flops[f"LSTM layer T={T} B={B} {I}->{H}"] == forward_lstm + backward_lstm
    assert clock.seconds["CrossEntropy"] > 0 and clock.flops["CrossEntropy"] == 0
    assert all(clock.calls[k] == 1 for k in clock.calls if k.startswith(("conv", "linear", "LSTM")))
    clock.step_seconds = sum(clock.seconds.values()) * 1.5
    lines = clock.lines(peak_gflops=100.0, steps=1)
    assert lines[0].startswith("step ") and any(line.lstrip().startswith("GEMM-bound ops") for line in lines)
