"""The event engine re-shares only the flows connected to a change (flows.Flows.reshare): the same times as
re-sharing every flow in flight, since max-min fairness shares each connected set of flows and links on its own."""

from __future__ import annotations

import numpy as np
import pytest

import collectives
from collectives.cost import CostParams
from collectives.virtual_time import flows


def everything(count, links, flow_of, link_of, seeds):
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
    assert flows._connected(3, 4, flow_of, link_of, np.array([0])).tolist() == [True, True, False]
    assert flows._connected(3, 4, flow_of, link_of, np.array([3])).tolist() == [False, False, True]
