"""A profile robust to load (issue 26): each time is the minimum over the profiled steps (load only adds time),
the steps' spread is reported, and a spread that shows contention is refused (ContentionError, one line in the
simulator's command line), so that a simulated cluster is not built on a busy machine's 10x slow step."""

from __future__ import annotations

import time

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.simulate.profile import ContentionError, capture, judge_spread

SLOW = 0.05  # seconds another process "takes" in two steps of three


def busy_capture(max_spread: float | None):
    """A tiny model's profile, two steps of three slowed by SLOW s in the forward, as a busy core would."""
    minidl.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y, calls = np.ones((4, 8), np.float32), np.arange(4) % 3, []

    def forward():
        calls.append(1)
        if len(calls) % 3:
            time.sleep(SLOW)
        return F.cross_entropy(model(minidl.tensor(x)), y)

    return capture("mlp", "items", 4, model, opt, forward, opt.step, steps=6, max_spread=max_spread)


def test_the_fastest_step_is_kept_and_the_spread_reported():
    profile = busy_capture(max_spread=None)
    assert profile.forward_s < SLOW / 2  # a median would be a slowed step
    assert "minimum of 6 steps, spread +" in profile.source


def test_a_profile_from_a_busy_machine_is_refused():
    with pytest.raises(ContentionError, match=r"steps spread \+\d+% .* other processes are using"):
        busy_capture(max_spread=1.0)


def test_spread_in_words():
    assert judge_spread([0.10, 0.11, 0.12], 1.0) == "spread +10% (median step over fastest)"
    assert judge_spread([0.1, 0.9], 1.0).startswith("spread not judged")
    with pytest.raises(ContentionError):
        judge_spread([0.1, 0.25, 0.3], 1.0)
