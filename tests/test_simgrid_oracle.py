"""SimGrid (3.32, CM02, factors 1) as the oracle of the virtual-time cluster, on a small subset.

benchmarks/simgrid_validation.py replays minidl's traces in SimGrid on the same platform; here ring,
recursive doubling and the binomial tree at p = 8 on a 2:1 fat tree and a 2-D torus, one long and one
short message, must agree within 3% (they agree to rounding); so must the fat trees routed destination-mod-k
(SimGrid's FAT_TREE, two and three levels) and gather and scatter. Skipped, with the reason, where the
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


@pytest.mark.parametrize("topology", ["ftree2", "ftree3"])
@pytest.mark.parametrize("algorithm", ["recursive_doubling", "rabenseifner"])
def test_static_routing_agrees_with_simgrids_fat_tree(topology, algorithm):
    """SimGrid's FAT_TREE (destination-mod-k): at p = 12 and 24 the fold loads one uplink of two; the trunk misses it."""
    p = 12 if topology == "ftree2" else 24  # ftree3: leaves of 4 in pods of 4, so 24 nodes span two pods
    args = (algorithm, p, 1 << 20, topology, 1e-6, 4)
    oracle = simgrid_time(*args)
    assert minidl_time(*args) == pytest.approx(oracle, rel=1e-6)
    assert minidl_time(*args, routing="trunk") < 0.8 * oracle


@pytest.mark.parametrize("topology", ["switch", "ftree2", "torus2d"])
@pytest.mark.parametrize("algorithm", ["gather", "scatter"])
def test_gather_and_scatter_agree_with_simgrid(topology, algorithm):
    """The oracle keeps each Irecv's data holder until its Wait (it segfaulted without); the root's NIC is the
    bottleneck on every platform (on the torus, SimGrid's limiter_link)."""
    args = (algorithm, 12, 1 << 16, topology, 1e-6, 4)
    assert minidl_time(*args) == pytest.approx(simgrid_time(*args), rel=1e-6)


@pytest.mark.parametrize("algorithm", ["rabenseifner", "gather"])
def test_dragonfly_agrees_with_simgrid(algorithm):
    """SimGrid's DRAGONFLY with one chassis a group: routers of 2 hosts, groups of 4, 3 groups at p = 24."""
    args = (algorithm, 24, 1 << 20, "dragonfly", 1e-6, 4)
    assert minidl_time(*args) == pytest.approx(simgrid_time(*args), rel=1e-6)
