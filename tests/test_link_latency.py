"""Latency on the route (issue 23): every link a message crosses adds ``link_latency`` to its per-message alpha.

The replay against the closed form (cost.route_links, the "formula" engine) on every topology, the
hop counts of each topology, and SimGrid as an oracle where the system Python has it
(benchmarks/simgrid_validation.py runs the full table: p = 8..256, 1 KiB..100 MB).
"""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives import cost
from collectives.auto import choose_algorithm
from collectives.cost import CostParams
from collectives.virtual_time.network import Cluster
from collectives.virtual_time.topology import make_topology
from minidl.simulate.cli import build_parser, network_options

PARAMS = CostParams(alpha=3e-6, beta=1 / 1.25e9, gamma=1e-10)
LAT = 1e-6
TOPOLOGIES = [("crossbar", {}), ("switch", {}), ("fattree", {"leaf_size": 4, "oversubscription": 2.0}), ("torus2d", {})]


def time(algorithm, p, nbytes, topology, engine="auto", link_latency=LAT, **options):
    return collectives.allreduce_time(
        algorithm, p, nbytes, "crossbar", PARAMS, topology=topology, link_latency=link_latency, engine=engine, **options
    )


def test_hops_per_topology():
    assert make_topology("switch", 8, 1e9).hops(0, 7) == 2
    assert make_topology("crossbar", 8, 1e9).hops(0, 7) == 2
    tree = make_topology("fattree", 8, 1e9, leaf_size=4)
    assert (tree.hops(0, 3), tree.hops(3, 4)) == (2, 4)
    torus = make_topology("torus2d", 256, 1e9)  # 16 x 16: hosts are the routers
    assert (torus.hops(0, 1), torus.hops(0, 16), torus.hops(0, 15)) == (1, 1, 1)  # neighbours, the wrap included
    assert torus.hops(0, 8 * 16 + 8) == 16  # the far corner: 8 hops in each dimension
    fabric = Cluster("10gbe", "fattree", ranks_per_node=2, leaf_size=2, link_latency=LAT).fabric(8)
    assert (fabric.hops(0, 1), fabric.hops(0, 2), fabric.hops(0, 4)) == (0, 2, 4)  # same node: shared memory
    assert fabric.path(0, 4).latency == pytest.approx(12e-6 + 4 * LAT)  # 10GbE alpha, then 4 links


def test_each_link_adds_its_latency_on_the_crossbar():
    """2 links a message: the ring on p ranks pays 2 (p - 1) rounds x 2 link latencies more, exactly."""
    p = 6
    without = time("ring", p, 6000, "crossbar", engine="events", link_latency=0.0)
    assert time("ring", p, 6000, "crossbar", engine="events") == pytest.approx(
        without + 2 * (p - 1) * 2 * LAT, rel=1e-12
    )
    assert cost.predict("ring", p, 6000, PARAMS, link_latency=LAT) == pytest.approx(
        cost.predict("ring", p, 6000, PARAMS) + 2 * (p - 1) * 2 * LAT, rel=1e-12
    )


@pytest.mark.parametrize("topology,options", TOPOLOGIES)
@pytest.mark.parametrize("algorithm", cost.ALGORITHMS)
def test_closed_form_is_the_replay_on_powers_of_two(topology, options, algorithm):
    """On a power of two every round's messages cross as many links and share alike: the formula is exact."""
    for nbytes in (1024, 1 << 22):
        replayed = time(algorithm, 16, nbytes, topology, engine="events", **options)
        assert time(algorithm, 16, nbytes, topology, engine="formula", **options) == pytest.approx(replayed, rel=1e-9)


def test_closed_form_at_scale_matches_the_rounds_engine():
    for topology, options in TOPOLOGIES[2:]:
        for algorithm in ("ring", "recursive_doubling"):
            rounds = time(algorithm, 256, 1 << 24, topology, engine="rounds", **options)
            assert time(algorithm, 256, 1 << 24, topology, engine="formula", **options) == pytest.approx(
                rounds, rel=1e-9
            )


def test_route_links_count_the_longest_route_of_each_round():
    torus = make_topology("torus2d", 16, 1e9)  # 4 x 4: recursive doubling's partners 1, 2, 4, 8 away
    assert cost.route_links("recursive_doubling", 16, torus.hops) == 1 + 2 + 1 + 2
    tree = make_topology("fattree", 16, 1e9, leaf_size=4)
    assert cost.route_links("ring", 16, tree.hops) == 2 * 15 * 4  # the ring crosses leaves every round
    assert cost.route_links("tree", 16) == 2 * 4 * 2  # 2 log2 p rounds of 2 links
    assert cost.route_links("recursive_doubling", 6) == 2 * (2 + 2)  # the fold in and out, 2 doubling rounds


def test_auto_takes_the_topology_into_account():
    """allreduce_time's auto: the simulated minimum; choose_algorithm: the closed form with the routes."""
    times = {a: time(a, 64, 1 << 16, "torus2d") for a in cost.ALGORITHMS}
    assert time("auto", 64, 1 << 16, "torus2d") == min(times.values())
    torus = make_topology("torus2d", 64, 1e9)
    _, flat = choose_algorithm(64, 1 << 16, PARAMS)
    _, routed = choose_algorithm(64, 1 << 16, PARAMS, link_latency=LAT, hops=torus.hops)
    assert routed["recursive_doubling"] - flat["recursive_doubling"] == pytest.approx(
        LAT * cost.route_links("recursive_doubling", 64, torus.hops)
    )


def test_bad_link_latency_and_the_flag():
    with pytest.raises(ValueError, match="link_latency"):
        time("ring", 4, 64, "switch", link_latency=-1e-6)
    args = build_parser().parse_args(["lm", "--link-latency", "2e-6", "--topology", "torus2d"])
    assert network_options(args) == {"topology": "torus2d", "link_latency": 2e-6}
    with pytest.raises(Exception, match="--link-latency"):
        network_options(build_parser().parse_args(["lm", "--link-latency", "-1"]))


def test_rtt_sharing_weighs_each_flow_by_one_over_its_latency():
    """SimGrid's CM02 shares a bottleneck in proportion to 1 / latency: two flows of 4 and 5 hops get 5/9 and 4/9."""
    from collectives.virtual_time.flows import max_min_rates

    rates = max_min_rates(np.array([9.0, 100.0]), [(0,), (0, 1)], np.full(2, np.inf), np.array([1 / 4, 1 / 5]))
    assert rates == pytest.approx([5.0, 4.0])
    assert max_min_rates(np.array([9.0]), [(0,), (0,)], np.array([1.0, np.inf]), np.array([1.0, 2.0])) == pytest.approx(
        [1.0, 8.0]
    )  # a capped flow leaves the rest to the other
    with pytest.raises(ValueError, match="sharing"):
        Cluster("10gbe", sharing="fair")


def test_torus_ties_go_the_way_simgrid_s_torus_goes():
    from collectives.virtual_time.topology import _forward

    assert _forward(0, 5, 10) and _forward(6, 1, 10) and not _forward(5, 0, 10)  # half way round: forward, but 5 -> 0
    assert not _forward(0, 9, 10) and _forward(9, 0, 10) and not _forward(3, 3, 10)
