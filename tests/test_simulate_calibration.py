"""The calibration the simulator claims (issue 23): calibrated constants apply to the link they were measured on.

``python -m collectives.virtual_time.calibrate`` measures alpha and beta among the ranks of this
machine, so they are the link within a node: with every rank on one node (ranks_per_node = p) the
prediction must follow them, not the built-in shared-memory constants.
"""

from __future__ import annotations

import pytest

import collectives
from collectives import cost
from collectives.cost import CostParams
from collectives.virtual_time.network import LINKS, get_network
from minidl.simulate import Cluster, NodeSpec, described, simulate_step

SLOW = CostParams(alpha=1.0, beta=1e-3, gamma=1e-10)


@pytest.mark.parametrize("p", [2, 3, 4])
def test_calibrated_constants_apply_within_a_node(p):
    """One node of p ranks on "crossbar": the closed form of the calibrated alpha and beta, exactly."""
    n = 4096 * p
    t = collectives.allreduce_time("ring", p, n, "crossbar", SLOW, ranks_per_node=p)
    assert t == pytest.approx(cost.predict("ring", p, n, SLOW), rel=1e-12)
    assert t > 2 * (p - 1)  # 2 (p - 1) rounds of a 1 s alpha: not shared memory's 5 us


def test_a_named_link_takes_the_calibration_within_its_nodes():
    net = get_network("10gbe", SLOW, ranks_per_node=2)
    fabric = net.fabric(4)
    assert fabric.path(0, 1).latency == SLOW.alpha  # within a node: measured here
    assert fabric.path(1, 2).latency == LINKS["10gbe"].alpha  # between nodes: the link's own
    assert get_network("10gbe", None, ranks_per_node=2).fabric(4).path(0, 1).latency == LINKS["shm"].alpha


def test_the_simulated_step_follows_the_calibration():
    profile = described(1e5, 100.0, 10)
    node = NodeSpec(ranks_per_node=4, cores=2)
    fast = simulate_step(profile, Cluster(1, "crossbar", node, CostParams(1e-6, 1e-10, 1e-10)), "ring")
    slow = simulate_step(profile, Cluster(1, "crossbar", node, SLOW), "ring")
    assert slow.comm_s > 6 > fast.comm_s  # the ring's 6 rounds at alpha = 1 s


def test_ranks_beyond_the_cores_and_other_work_share_the_cores():
    """Busy-polling ranks are always runnable: p ranks and L other tasks share c cores fairly, and a rank that
    time-shares a core keeps ``sharing`` of its speed (node.py)."""
    no_load = [NodeSpec(ranks_per_node=p, cores=2, load=0).rank_speedup for p in (1, 2, 3, 4)]
    assert no_load == pytest.approx([1, 1, 2 / 3, 1 / 2])
    assert no_load == pytest.approx([NodeSpec(ranks_per_node=p, cores=min(p, 2)).rank_speedup for p in (1, 2, 3, 4)])
    shared = [NodeSpec(ranks_per_node=p, cores=2, load=0, sharing=0.8).rank_speedup for p in (1, 2, 3, 4)]
    assert shared == pytest.approx([1, 1, 0.8 * 2 / 3, 0.8 / 2])  # only where ranks outnumber the cores
    # 12 other tasks: the profiled rank had 2/13 of a core, each of 4 ranks gets 2/16; both time-shared
    assert NodeSpec(ranks_per_node=4, cores=2, load=12).rank_speedup == pytest.approx(13 / 16)
    assert NodeSpec(ranks_per_node=4, cores=2, load=12, sharing=0.5).rank_speedup == pytest.approx(13 / 16)
    assert NodeSpec(ranks_per_node=1, cores=2, load=1, sharing=0.5).rank_speedup == 1  # 2 tasks, 2 cores
    assert NodeSpec(ranks_per_node=2, cores=2, load=1, sharing=0.5).rank_speedup == pytest.approx(0.5 * 2 / 3)
    assert NodeSpec(ranks_per_node=1, cores=28, efficiency=0.5).rank_speedup == 14  # threads: fewer ranks than cores
    with pytest.raises(ValueError, match="sharing"):
        NodeSpec(sharing=1.5)
    with pytest.raises(ValueError, match="load"):
        NodeSpec(load=-1)
