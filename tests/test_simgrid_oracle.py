"""SimGrid (3.32, CM02, factors 1) as the oracle of the virtual-time cluster, on a small subset.

benchmarks/simgrid_validation.py replays minidl's traces in SimGrid on the same platform; here ring,
recursive doubling and the binomial tree at p = 8 on a 2:1 fat tree and a 2-D torus, one long and one
short message, must agree within 3% (they agree to rounding). Skipped, with the reason, where the
system Python has no SimGrid (``apt-get install python3-simgrid``).
"""

from __future__ import annotations

import pytest

from benchmarks.simgrid_validation import minidl_time, simgrid_available, simgrid_time

REASON = simgrid_available()
pytestmark = pytest.mark.skipif(REASON is not None, reason=f"SimGrid oracle: {REASON}")


@pytest.mark.parametrize("topology", ["fattree", "torus2d"])
@pytest.mark.parametrize("algorithm,nbytes", [("ring", 1 << 20), ("recursive_doubling", 1024), ("tree", 1 << 16)])
def test_minidl_agrees_with_simgrid(topology, algorithm, nbytes):
    args = (algorithm, 8, nbytes, topology, 2e-6, 2)  # leaves of 2: most messages cross 4 links
    assert minidl_time(*args) == pytest.approx(simgrid_time(*args), rel=0.03)
