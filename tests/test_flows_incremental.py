"""The event engine re-shares only the flows connected to a change (flows.Flows.reshare): the same times as
re-sharing every flow in flight, since max-min fairness shares each connected set of flows and links on its own."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives.cost import CostParams
from collectives.virtual_time import flows


def everything(count, binds, flow_of, link_of, seeds, flows):
    return np.ones(count, dtype=bool)


CASES = [
    ("rabenseifner", 24, {"topology": "torus2d"}),
    ("recursive_doubling", 24, {"topology": "fattree", "leaf_size": 4, "oversubscription": 2.0, "routing": "static"}),
    ("ring", 12, {"topology": "torus3d", "dims": (3, 2, 2)}),
    ("gather", 16, {"topology": "torus2d"}),
]


@pytest.mark.parametrize("sharing", ["maxmin", "rtt"])
@pytest.mark.parametrize("algorithm,p,options", CASES)
def test_resharing_the_connected_flows_is_resharing_all(monkeypatch, algorithm, p, options, sharing):
    params = CostParams(2e-6, 1 / 1.25e9, 1e-10)
    args = (algorithm, p, 1 << 20, "crossbar", params)
    kwargs = {"link_latency": 1e-6, "sharing": sharing, "engine": "events", **options}
    part = collectives.allreduce_time(*args, **kwargs)
    monkeypatch.setattr(flows, "_connected", everything)
    assert part == pytest.approx(collectives.allreduce_time(*args, **kwargs), rel=1e-12)


def test_connected_follows_links_through_flows():
    # flows 0: links (0, 1); 1: (1, 2); 2: (3,); seeds link 0 -> flows 0 and 1 (through link 1), not 2
    flow_of, link_of = np.array([0, 0, 1, 1, 2]), np.array([0, 1, 1, 2, 3])
    binds = np.ones(4, dtype=bool)
    none = np.zeros(0, dtype=np.int64)
    assert flows._connected(3, binds, flow_of, link_of, np.array([0]), none).tolist() == [True, True, False]
    assert flows._connected(3, binds, flow_of, link_of, np.array([3]), none).tolist() == [False, False, True]
    # link 1 cannot limit a flow: flows 0 and 1 no longer affect each other; a started flow is always reached
    binds[1] = False
    assert flows._connected(3, binds, flow_of, link_of, np.array([0]), none).tolist() == [True, False, False]
    assert flows._connected(3, binds, flow_of, link_of, none, np.array([2])).tolist() == [False, False, True]


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
