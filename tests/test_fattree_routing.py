"""Fat trees routed over separate uplinks (``routing="static"``, destination-mod-k) against closed forms and SimGrid.

A leaf of L nodes at o:1 has L / o uplinks of the link's bandwidth B; a flow to node d leaves on uplink d mod
(L / o), as SimGrid's FAT_TREE and InfiniBand's ftree route it. Two flows to destinations that agree mod the
uplinks share one uplink (B / 2 each) while another idles; under the aggregated trunk (``routing="trunk"``,
the default) they share L B / o and each gets B.
"""

from __future__ import annotations

import os
import re

import pytest

import collectives
from collectives.cost import CostParams
from collectives.virtual_time.network import Cluster, Link
from collectives.virtual_time.replay import replay
from collectives.virtual_time.topology import FatTree, make_topology
from collectives.virtual_time.trace import Event

B, ALPHA, HOP, N = 1e9, 3e-6, 1e-6, 1 << 20


def one_way(pairs: list[tuple[int, int]], p: int, **tree) -> float:
    """Virtual seconds for every (src, dst) of ``pairs`` to send N bytes at once on a fat tree of p nodes."""
    traces: list[list[Event]] = [[] for _ in range(p)]
    for tag, (src, dst) in enumerate(pairs):
        traces[src].append(Event("send", dst, tag, N))
        traces[dst].append(Event("recv", src, tag, N))
    net = Cluster(Link("test", ALPHA, B), topology="fattree", link_latency=HOP, **tree)
    return replay(traces, net).time


TWO_LEVELS = {"leaf_size": 4, "oversubscription": 2.0}  # leaves of 4 nodes, 2 uplinks each, 2 spines


@pytest.mark.parametrize("routing", ["static", "trunk"])
def test_flows_to_destinations_apart_mod_the_uplinks_get_a_link_each(routing):
    # 0 -> 4 on uplink 0, 1 -> 5 on uplink 1: each flow alone on its links
    assert one_way([(0, 4), (1, 5)], 8, routing=routing, **TWO_LEVELS) == pytest.approx(ALPHA + 4 * HOP + N / B)


def test_flows_to_destinations_equal_mod_the_uplinks_share_one_under_static_routing():
    # 0 -> 4 and 1 -> 6: both destinations even, both on leaf 0's uplink 0 (uplink 1 idles): B / 2 each
    static = one_way([(0, 4), (1, 6)], 8, routing="static", **TWO_LEVELS)
    assert static == pytest.approx(ALPHA + 4 * HOP + 2 * N / B)
    # the aggregated trunk (2 B) gives each B: it spreads the flows as no static routing does
    assert one_way([(0, 4), (1, 6)], 8, routing="trunk", **TWO_LEVELS) == pytest.approx(ALPHA + 4 * HOP + N / B)


def test_three_levels_collide_on_a_spine_uplink():
    # leaves of 4 (2 uplinks), pods of 2 leaves, spines 2:1 (1 uplink each): 16 nodes, 2 pods, 2 cores
    tree = {**TWO_LEVELS, "pod_size": 2, "spine_oversubscription": 2.0, "routing": "static"}
    across = ALPHA + 6 * HOP  # host, leaf, spine, core, spine, leaf, host
    # 0 -> 8 and 4 -> 10 leave different leaves on their uplink 0, meet on spine 0 and share its one uplink
    assert one_way([(0, 8), (4, 10)], 16, **tree) == pytest.approx(across + 2 * N / B)
    # 0 -> 8 and 4 -> 9 go through spines 0 and 1: nothing shared
    assert one_way([(0, 8), (4, 9)], 16, **tree) == pytest.approx(across + N / B)
    topo = make_topology("fattree", 16, B, **tree)
    assert [topo.hops(0, 1), topo.hops(0, 4), topo.hops(0, 8)] == [2, 4, 6]


def test_static_route_is_destination_mod_uplinks():
    tree = FatTree(12, B, leaf_size=4, oversubscription=2.0, routing="static")
    uplink = {d: tree.route(0, d)[1] for d in range(4, 12)}  # leaf 0's uplink a flow to d takes
    assert len(set(uplink.values())) == 2
    assert all(uplink[d] == uplink[4 + (d % 2)] for d in uplink)
    assert tree.capacity.size == 2 * 12 + 2 * 3 * 2 and (tree.capacity == B).all()  # NICs, 3 leaves x 2 uplinks
    trunk = FatTree(12, B, leaf_size=4, oversubscription=2.0)
    assert trunk.capacity.max() == 2 * B and trunk.route(0, 5) == trunk.route(0, 4)[:2] + trunk.route(1, 5)[2:]


# The minimal case: p = 12, leaves of 4 with 2 uplinks, recursive doubling (the fold leaves the odd ranks of
# the first leaves active), 1 MiB, links of 1.25 GB/s and 1 us, no alpha, gamma 0, CM02's sharing. SimGrid 3.32
# (benchmarks/simgrid_oracle.py on its FAT_TREE cluster "2;4,3;1,2;1,1") gave 0.007563747200000001 s.
SIMGRID_P12 = 0.0075637472


def minimal_case(routing: str) -> float:
    params = CostParams(0.0, 1 / 1.25e9, 0.0)
    return collectives.allreduce_time(
        "recursive_doubling", 12, N, "crossbar", params, link_latency=1e-6, sharing="rtt",
        topology="fattree", leaf_size=4, oversubscription=2.0, routing=routing,
    )  # fmt: skip


def test_minimal_case_agrees_with_simgrid():
    assert minimal_case("static") == pytest.approx(SIMGRID_P12, rel=1e-9)
    assert minimal_case("trunk") == pytest.approx(0.0050471648, rel=1e-9)  # 0.667x: the trunk spreads the fold


@pytest.mark.parametrize("algorithm", ["recursive_doubling", "rabenseifner"])
def test_rounds_engine_agrees_with_events_on_static_routing(algorithm):
    params = CostParams(0.0, 1 / 1.25e9, 1e-10)
    tree = {"topology": "fattree", "leaf_size": 8, "oversubscription": 4.0, "routing": "static"}
    times = [
        collectives.allreduce_time(algorithm, 64, N, "crossbar", params, link_latency=1e-6, engine=e, **tree)
        for e in ("events", "rounds")
    ]
    assert times[1] == pytest.approx(times[0], rel=1e-9)


@pytest.mark.parametrize(
    "topology,options,words",
    [
        ("fattree", {"routing": "ecmp"}, "unknown routing 'ecmp'"),
        ("fattree", {"leaf_size": 4, "oversubscription": 1.5, "routing": "static"}, "2.66667 uplinks"),
        ("fattree", {"pod_size": 0}, "pod_size must be >= 1"),
        ("torus2d", {"routing": "static"}, "takes no option 'routing'"),
        ("switch", {"leaf_size": 4}, "takes no option 'leaf_size' (it takes none)"),
        ("torus2d", {"dims": (2, 2, 2, 2, 2)}, "'torus2d' is 2-D but dims (2, 2, 2, 2, 2) has 5"),
        ("torus", {}, "'torus' needs dims"),
    ],
)
def test_bad_options_are_one_line_errors(topology, options, words):
    with pytest.raises(ValueError, match=None) as err:
        Cluster("10gbe", topology=topology, **options).fabric(32)
    assert words in str(err.value) and "\n" not in str(err.value)


def test_torus_takes_any_dims():
    topo = make_topology("torus", 32, B, dims=(2, 2, 2, 2, 2))
    assert topo.dims == (2, 2, 2, 2, 2) and topo.hops(0, 31) == 5
    assert make_topology("torus3d", 8, B, dims=(2, 2, 2)).dims == (2, 2, 2)


def test_trunk_is_the_default_and_unchanged_for_shifts():
    """The ring (a shift permutation) spreads over the uplinks' residues: both routings give the same time."""
    params = CostParams(0.0, 1 / 1.25e9, 1e-10)
    tree = {"topology": "fattree", "leaf_size": 4, "oversubscription": 2.0}
    default = collectives.allreduce_time("ring", 24, N, "crossbar", params, link_latency=1e-6, **tree)
    static = collectives.allreduce_time("ring", 24, N, "crossbar", params, link_latency=1e-6, routing="static", **tree)
    trunk = collectives.allreduce_time("ring", 24, N, "crossbar", params, link_latency=1e-6, routing="trunk", **tree)
    assert default == trunk == pytest.approx(static, rel=1e-9)


def test_docs_routed_table_is_the_saved_run():
    """docs/simulator-validation.md's routed table is what `--table docs/data/simgrid_routed.json` prints."""
    from benchmarks import validation_tables as vt

    saved = os.path.join(vt.ROOT, "docs", "data", "simgrid_routed.json")
    rows = vt.load(saved)["rows"]
    page = open(os.path.join(vt.ROOT, "docs", "simulator-validation.md")).read()
    section = page.split("### Fat trees routed over separate uplinks", 1)[1].split("\n## ", 1)[0]
    tables = re.findall(r"```\n( +p  topology.*?)```", section, flags=re.S)
    assert tables and tables[0].splitlines() == vt.simgrid_table(rows)
    assert max(abs(vt.error(r)) for r in rows) < 1e-3 and {r["topology"] for r in rows} >= {"ftree2", "ftree3"}


# -- the dragonfly: groups of routers joined all-to-all, one global link between every two groups, minimal routing
DRAGONFLY = {"router_size": 2, "group_size": 4}  # 8 nodes a group, at most 4 groups


def test_dragonfly_routes_are_minimal():
    topo = make_topology("dragonfly", 32, B, **DRAGONFLY)
    # 0 (group 0, router 0) -> 1: its own router (the NICs); -> 2: one local link; -> 10 (group 1, router 1): a local
    # link to router 1 of group 0 (it holds the global link to group 1), the global link (arriving at router 0 of
    # group 1: the one for group 0), a local link to router 1; -> 8 (router 0 of group 1): no local link at the end;
    # 2 -> 8 (from router 1 of group 0): the global link alone
    hops = [topo.hops(0, 1), topo.hops(0, 2), topo.hops(0, 10), topo.hops(0, 8), topo.hops(2, 8)]
    assert hops == [2, 3, 5, 4, 3]
    assert set(topo.route(0, 8)) & set(topo.route(3, 9)) == {topo.route(2, 8)[1]}  # group 0's one link to group 1


def one_way_dragonfly(pairs: list[tuple[int, int]], **tree) -> float:
    traces: list[list[Event]] = [[] for _ in range(32)]
    for tag, (src, dst) in enumerate(pairs):
        traces[src].append(Event("send", dst, tag, N))
        traces[dst].append(Event("recv", src, tag, N))
    return replay(traces, Cluster(Link("test", ALPHA, B), topology="dragonfly", link_latency=HOP, **tree)).time


def test_dragonfly_global_link_is_shared_between_groups():
    # 0 -> 10 and 4 -> 12: group 0 to group 1, both on the one global link (local links apart): B / 2 each
    assert one_way_dragonfly([(0, 10), (4, 12)], **DRAGONFLY) == pytest.approx(ALPHA + 5 * HOP + 2 * N / B)
    # with global_links=2 it carries 2 B: each flow alone at B
    doubled = one_way_dragonfly([(0, 10), (4, 12)], global_links=2, **DRAGONFLY)
    assert doubled == pytest.approx(ALPHA + 5 * HOP + N / B)
    # 0 -> 10 and 4 -> 20: to groups 1 and 2, two global links
    assert one_way_dragonfly([(0, 10), (4, 20)], **DRAGONFLY) == pytest.approx(ALPHA + 5 * HOP + N / B)


def test_dragonfly_refuses_more_groups_than_a_group_has_routers():
    with pytest.raises(ValueError, match="at most 4 groups") as err:
        Cluster("10gbe", topology="dragonfly", **DRAGONFLY).fabric(40)
    assert "\n" not in str(err.value)
