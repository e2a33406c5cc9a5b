"""The event engine re-shares only the flows connected to a change (flows.Flows.reshare): the same times as
re-sharing every flow in flight, since max-min fairness shares each connected set of flows and links on its own."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives.cost import CostParams
from collectives.virtual_time import flows, replay


def everything(count, links, flow_of, link_of, flows):
    return np.ones(count, dtype=bool)


CASES = [
    ("rabenseifner", 24, {"topology": "torus2d"}),
    ("recursive_doubling", 24, {"topology": "fattree", "leaf_size": 4, "oversubscription": 2.0, "routing": "static"}),
    ("ring", 12, {"topology": "torus3d", "dims": (3, 2, 2)}),
    ("gather", 16, {"topology": "torus2d"}),
    ("rabenseifner", 48, {"topology": "torus", "dims": (4, 4, 3)}),  # flows kept below a change's level
]


@pytest.mark.parametrize("way", ["link by link", "in NumPy"])
@pytest.mark.parametrize("sharing", ["maxmin", "rtt"])
@pytest.mark.parametrize("algorithm,p,options", CASES)
def test_resharing_the_connected_flows_is_resharing_all(monkeypatch, algorithm, p, options, sharing, way):
    """What a change reaches (link by link, _nearby, or in NumPy, _connected: both keeping the flows below its
    level) re-shared, against every flow in flight re-shared at every change."""
    params = CostParams(2e-6, 1 / 1.25e9, 1e-10)
    args = (algorithm, p, 1 << 20, "crossbar", params)
    kwargs = {"link_latency": 1e-6, "sharing": sharing, "engine": "events", **options}
    if way == "in NumPy":
        monkeypatch.setattr(flows, "NEARBY", -1)
    replay._named_time.cache_clear()
    part = collectives.allreduce_time(*args, **kwargs)
    replay._named_time.cache_clear()  # (allreduce_time remembers a named network's times)
    monkeypatch.setattr(flows, "NEARBY", -1)  # never link by link: every change in NumPy, every flow
    monkeypatch.setattr(flows, "KEEP_LOWER", False)  # none kept for its level
    monkeypatch.setattr(flows, "_connected", everything)
    assert part == pytest.approx(collectives.allreduce_time(*args, **kwargs), rel=1e-12)


def test_rtt_sharing_without_latency_shares_equally():
    """SimGrid's CM02 weighs a flow by 1 / its latency: with none (alpha and link latency 0), the weights are equal."""
    args = ("rabenseifner", 24, 1 << 20, "crossbar", CostParams(0.0, 1 / 1.25e9, 0.0))
    kwargs = {"link_latency": 0.0, "engine": "events", "topology": "torus2d"}
    rtt = collectives.allreduce_time(*args, sharing="rtt", **kwargs)
    assert rtt != collectives.allreduce_time(*args[:4], CostParams(1e-6, 1 / 1.25e9, 0.0), sharing="rtt", **kwargs)
    assert rtt == pytest.approx(collectives.allreduce_time(*args, sharing="maxmin", **kwargs), rel=1e-12)


def test_connected_follows_links_through_flows():
    # flows 0: links (0, 1); 1: (1, 2); 2: (3,); from flow 0 -> flows 0 and 1 (through link 1), not 2
    flow_of, link_of = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 2, 3])
    assert flows._connected(3, 4, flow_of, link_of, np.array([0])).tolist() == [True, True, False]
    assert flows._connected(3, 4, flow_of, link_of, np.array([2])).tolist() == [False, False, True]
    # link 1 cannot limit a flow (the caller leaves its crossings out): flows 0 and 1 no longer affect each other
    keep = link_of != 1
    assert flows._connected(3, 4, flow_of[keep], link_of[keep], np.array([0])).tolist() == [True, False, False]


def test_nearby_follows_binding_links_at_or_above_the_floor():
    # slots 0: links (0, 1); 1: (1, 2); 2: (3,); capacities 10; rates 1, 2, 3 at weight 1 (levels 1, 2, 3)
    routes, on_link = [(0, 1), (1, 2), (3,)], [{0}, {0, 1}, {1}, {2}]
    rate, capacity, every = [1.0, 2.0, 3.0], np.full(4, 10.0), bytes([1, 1, 1, 1])

    def nearby(first, flags=every, floor=0.0, most=10):
        return flows._nearby(first, flags, on_link, routes, rate, floor, rate, capacity, most)

    assert nearby({0}) == ({0, 1}, {0: 10.0, 1: 10.0, 2: 10.0})  # through link 1
    assert nearby({2}) == ({2}, {3: 10.0})
    assert nearby({0}, flags=bytes([1, 0, 1, 1])) == ({0}, {0: 10.0})  # link 1 cannot limit a flow
    assert nearby({0}, most=1) is None
    # flow 0 (level 1) is below the floor: it keeps its rate, and link 1 has 10 - 1 left for flow 1
    assert nearby({1}, floor=1.5) == ({1}, {1: 9.0, 2: 10.0})


def test_binding_links_are_those_whose_flows_caps_exceed_them():
    # link 0 carries two flows of cap 1 (capacity 2: never full before both reach their caps), link 1 three
    flow_of, link_of = np.array([0, 1, 1, 2, 3]), np.array([0, 0, 1, 1, 1])
    caps = np.ones(4)
    assert flows.binding(np.array([2.0, 2.0]), flow_of, link_of, caps).tolist() == [False, True]


def test_the_textbook_filling_on_a_worked_example():
    """Flow 0 crosses links 0 and 1, flow 1 link 0, flow 2 link 1; capacities 1 and 2. Level 0.5 fills link 0
    (flows 0 and 1 freeze there); link 1 then has 1.5 left for flow 2 alone. With flow 2 capped at 1, it stops
    there. Weights 1 and 3 on link 0: flow 1 takes three quarters of it."""
    assert flows.filling_by_levels(np.array([1.0, 2.0]), [[0, 1], [0], [1]], [9.0, 9.0, 9.0]) == [0.5, 0.5, 1.5]
    assert flows.filling_by_levels(np.array([1.0, 2.0]), [[0, 1], [0], [1]], [9.0, 9.0, 1.0]) == [0.5, 0.5, 1.0]
    assert flows.filling_by_levels(np.array([1.0, 2.0]), [[0], [0]], [9.0, 9.0], [1.0, 3.0]) == [0.25, 0.75]


@pytest.mark.parametrize("seed", range(40))
def test_the_rounds_of_local_bottlenecks_give_the_levels_rates(seed):
    """The filling freezes every link that is the lowest of all its flows' links in one round; the rates are
    those of the textbook's one level at a time, on random routes, capacities, caps and weights."""
    rng = np.random.default_rng(seed)
    n, links_count = int(rng.integers(1, 30)), int(rng.integers(1, 12))
    links = [
        tuple(rng.choice(links_count, size=int(rng.integers(0, min(5, links_count) + 1)), replace=False))
        for _ in range(n)
    ]
    capacity = rng.choice([1.0, 2.0, 3.0, 10.0], size=links_count)
    caps = rng.choice([0.5, 1.0, 4.0, 100.0], size=n)
    weights = rng.uniform(0.2, 3.0, n) if seed % 2 else None
    got = flows.max_min_rates(capacity, links, caps, weights)
    expected = flows.filling_by_levels(capacity, [list(ls) for ls in links], caps.tolist(), weights)
    assert got == pytest.approx(expected, rel=1e-9)


def test_a_message_of_no_bytes_ends_as_it_starts_beside_others():
    """Ring on 4 ranks of 8 bytes (two floats): two of its blocks are empty, so messages of 0 bytes start with
    messages of 4 (the engine once shared the links with the ended ones and never moved on). The time is that
    of the engine before this one, and of re-sharing every flow at every change."""
    args = ("ring", 4, 8, "10gbe", CostParams(5e-6, 3e-10, 7e-11))
    replay._named_time.cache_clear()
    part = collectives.allreduce_time(*args)
    replay._named_time.cache_clear()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(flows, "NEARBY", -1)
        patch.setattr(flows, "KEEP_LOWER", False)
        patch.setattr(flows, "_connected", everything)
        assert part == pytest.approx(collectives.allreduce_time(*args), rel=1e-12)
    replay._named_time.cache_clear()
    assert part == pytest.approx(7.202117898305084e-05, rel=1e-12)  # the engine before slots (and at every change)
