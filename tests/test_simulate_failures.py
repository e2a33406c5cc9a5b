"""Node failures and checkpoint intervals in virtual time (``minidl.simulate.failures``)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from minidl.simulate import failures as f


def test_young_daly_interval_minimises_the_first_order_loss():
    c, m = 60.0, 34 * 3600.0
    best = f.young_daly_interval(c, m)
    assert best == pytest.approx(math.sqrt(2 * c * m))
    grid = np.linspace(0.2 * best, 5 * best, 2001)
    assert grid[np.argmin([f.lost_first_order(t, c, m) for t in grid])] == pytest.approx(best, rel=5e-3)
    with pytest.raises(ValueError, match="must be > 0"):
        f.young_daly_interval(0.0, m)


def test_without_failures_only_the_checkpoints_cost():
    out = f.simulate(work=1000.0, interval=100.0, checkpoint_cost=5.0, mtbf=1e18)
    assert out.failures == 0 and out.wall == pytest.approx(1000.0 + 9 * 5.0)  # no checkpoint after the last segment


def test_simulation_agrees_with_first_order_and_is_best_near_sqrt_2cm():
    c, r, m = 60.0, 120.0, 20 * 3600.0
    best = f.young_daly_interval(c, m)
    sims = {k: f.simulate(300 * m, k * best, c, m, r, seed=1).lost for k in (0.25, 1.0, 4.0)}
    assert sims[1.0] < sims[0.25] and sims[1.0] < sims[4.0]
    assert sims[1.0] == pytest.approx(f.lost_first_order(best, c, m, r), rel=0.15)


def test_table_names_both_node_counts(capsys):
    assert f.main(["--nodes", "32,256", "--intervals-min", "30,120"]) == 0
    out = capsys.readouterr().out
    assert "32 nodes: job MTBF 273.8 h" in out and "256 nodes: job MTBF 34.2 h" in out
    assert out.count("<- sqrt(2 C M)") == 2
    with pytest.raises(SystemExit, match="must be > 0"):
        f.main(["--nodes", "0"])
