"""Links, topologies, presets and max-min fair contention (collectives/virtual_time/network.py, topology.py, flows.py)."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from collectives import cost
from collectives.virtual_time.flows import max_min_rates
from collectives.virtual_time.network import LINKS, Cluster, get_network, known_networks
from collectives.virtual_time.replay import allreduce_time, replay
from collectives.virtual_time.topology import Torus, balanced_dims, make_topology
from collectives.virtual_time.trace import Event, trace


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def test_max_min_fair_rates():
    """Flow 0 crosses links 0 and 1, flow 1 link 0, flow 2 link 1: link 0 (capacity 1) is the bottleneck of
    flows 0 and 1 (1/2 each); flow 2 takes what flow 0 leaves of link 1 (2 - 1/2)."""
    rates = max_min_rates(np.array([1.0, 2.0]), [(0, 1), (0,), (1,)], np.full(3, np.inf))
    assert np.allclose(rates, [0.5, 0.5, 1.5])
    capped = max_min_rates(np.array([1.0]), [(0,), (0,)], np.array([0.2, np.inf]))  # a capped flow leaves the rest
    assert np.allclose(capped, [0.2, 0.8])
    assert np.allclose(max_min_rates(np.zeros(0), [(), ()], np.array([3.0, 4.0])), [3.0, 4.0])


@settings(max_examples=50)
@given(st.integers(1, 6), st.integers(1, 12), st.data())
def test_max_min_rates_are_feasible_and_each_flow_has_a_bottleneck(nlinks, nflows, data):
    capacity = np.array(data.draw(st.lists(st.floats(0.1, 10.0), min_size=nlinks, max_size=nlinks)))
    links = [tuple(sorted(data.draw(st.sets(st.integers(0, nlinks - 1), min_size=1)))) for _ in range(nflows)]
    rates = max_min_rates(capacity, links, np.full(nflows, np.inf))
    load = np.zeros(nlinks)
    for ls, r in zip(links, rates):
        load[list(ls)] += r
    assert (load <= capacity * (1 + 1e-9)).all()
    for ls, r in zip(links, rates):  # some link of the flow is full and no flow on it is faster
        full = [link for link in ls if load[link] >= capacity[link] * (1 - 1e-9)]
        assert any(max(rates[j] for j, lj in enumerate(links) if link in lj) <= r * (1 + 1e-9) for link in full)


def test_a_flow_that_ends_leaves_its_share_to_the_others():
    """Ranks 1 and 2 send m and 2m bytes to rank 0 through its one downlink: both at B/2 until the first
    ends (at alpha + 2m/B), then the second at B: alpha + 3m/B."""
    link, m = LINKS["10gbe"], 1 << 20
    root = [Event("irecv", 1, 0, m, request=0), Event("irecv", 2, 0, 2 * m, request=1)]
    root += [Event("wait", request=0), Event("wait", request=1)]
    traces = [root, [Event("send", 0, 0, m)], [Event("send", 0, 0, 2 * m)]]
    finish = replay(traces, "10gbe").finish
    assert close(finish[1], link.alpha + 2 * m * link.beta) and close(finish[2], link.alpha + 3 * m * link.beta)


def test_gather_shares_the_root_s_downlink():
    link, m, p = LINKS["1gbe"], 100_000, 8
    assert close(replay(trace("gather", p, m), "1gbe").time, link.alpha + (p - 1) * m * link.beta)
    assert close(replay(trace("gather", p, m), "1gbe", topology="crossbar").time, link.alpha + m * link.beta)


@pytest.mark.parametrize("name", sorted(LINKS))
@pytest.mark.parametrize("algorithm", ["ring", "tree", "recursive_doubling", "rabenseifner"])
def test_presets_without_contention_give_the_closed_form(name, algorithm):
    """One rank per node on a non-blocking switch: these algorithms never send two messages through one NIC."""
    link, p, n = LINKS[name], 8, 4 * 8 * 1000
    gamma = cost.get_params().gamma
    expected = cost.predict(algorithm, p, n, cost.CostParams(link.alpha, link.beta, gamma))
    assert close(allreduce_time(algorithm, p, n, name), expected)


def test_oversubscribed_fat_tree_slows_the_steps_between_leaves():
    """Recursive doubling on 16 nodes in leaves of 4: distances 1 and 2 stay in a leaf (B), distances 4 and 8
    cross it with all 4 nodes of a leaf sharing a trunk of 4 B / 4 = B: each flow gets B / 4."""
    link, n, gamma = LINKS["10gbe"], 1 << 22, cost.get_params().gamma
    t = allreduce_time("recursive_doubling", 16, n, "10gbe", topology="fattree", leaf_size=4, oversubscription=4)
    assert close(t, 4 * link.alpha + n * link.beta * (1 + 1 + 4 + 4) + 4 * n * gamma)
    full = allreduce_time("recursive_doubling", 16, n, "10gbe", topology="fattree", leaf_size=4, oversubscription=1)
    assert close(full, 4 * link.alpha + 4 * n * link.beta + 4 * n * gamma)


def test_ranks_of_a_node_talk_through_shared_memory():
    shm, n, gamma = LINKS["shm"], 1 << 20, cost.get_params().gamma
    t = allreduce_time("ring", 2, n, "1gbe", ranks_per_node=2)
    assert close(t, cost.predict("ring", 2, n, cost.CostParams(shm.alpha, shm.beta, gamma)))
    # 4 ranks on 2 nodes: every ring step has one message between the nodes, which sets its pace
    link = LINKS["1gbe"]
    t4 = allreduce_time("ring", 4, n, "1gbe", ranks_per_node=2)
    assert close(t4, cost.predict("ring", 4, n, cost.CostParams(link.alpha, link.beta, gamma)))


def test_torus_routes_are_shortest_and_dimension_ordered():
    assert balanced_dims(16, 2) == (4, 4) and balanced_dims(12, 3) == (3, 2, 2) and balanced_dims(7, 2) == (7, 1)
    torus = Torus(16, 1.0, ndims=2)
    for a in range(16):
        for b in range(16):
            if a != b:
                (xa, ya), (xb, yb) = divmod(a, 4), divmod(b, 4)
                hops = min((xa - xb) % 4, (xb - xa) % 4) + min((ya - yb) % 4, (yb - ya) % 4)
                assert len(torus.route(a, b)) == hops + 2  # NIC up, the hops, NIC down
    assert len(make_topology("torus3d", 27, 1.0).route(0, 13)) == 3 + 2  # (0,0,0) -> (1,1,1)


def test_torus_contention_on_recursive_doubling():
    """On a ring of 8 nodes (a torus 8 x 1) recursive doubling's distance-2 and distance-4 steps route several
    flows over each link (distance 4: four, both ways round), so it is much slower than on a switch."""
    n = 1 << 20
    switch = allreduce_time("recursive_doubling", 8, n, "ib-edr")
    torus = allreduce_time("recursive_doubling", 8, n, "ib-edr", topology="torus2d", dims=(8, 1))
    assert torus > switch * 1.5


def test_names_and_bad_input():
    assert {"crossbar", "1gbe", "10gbe", "25gbe", "ib-fdr", "ib-edr", "ib-hdr", "omnipath100", "shm"} <= set(
        known_networks()
    )
    assert get_network("EDR").link is LINKS["ib-edr"]
    with pytest.raises(ValueError, match="unknown network 'myrinet'.*1gbe.*ib-hdr"):
        get_network("myrinet")
    with pytest.raises(ValueError, match="unknown topology 'hypercube'.*fattree.*torus3d"):
        Cluster("10gbe", topology="hypercube")
    with pytest.raises(ValueError, match="ranks_per_node must be a positive integer"):
        Cluster("10gbe", ranks_per_node=0)
    with pytest.raises(ValueError, match="dims"):
        allreduce_time("ring", 8, 64, "10gbe", topology="torus2d", dims=(3, 3))
    with pytest.raises(ValueError, match="Network object"):
        get_network(Cluster(), ranks_per_node=2)


# -- calibration: measured here, saved as JSON, loaded by the simulator --------------------------
def test_calibrate_round_trips_through_json(tmp_path):
    import collectives
    from collectives.virtual_time import calibrate

    out = tmp_path / "calibration.json"
    results = collectives.simulate(
        2, lambda comm: calibrate.main(["--out", str(out), "--large", "64K", "--repeats", "2"], comm)
    )
    assert results[0] == results[1]  # every rank gets the slowest rank's numbers
    loaded = cost.load_params(str(out))
    assert loaded == results[0] and loaded.alpha > 0 and loaded.beta >= 0 and loaded.gamma > 0
    assert allreduce_time("ring", 4, 1 << 20, params=loaded) == pytest.approx(cost.predict("ring", 4, 1 << 20, loaded))


def test_load_params_refuses_bad_files(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text('{"alpha": 1e-6, "beta": -1, "gamma": 0}')
    with pytest.raises(ValueError, match="beta must be a finite non-negative number"):
        cost.load_params(str(bad))
    bad.write_text("alpha=1")
    with pytest.raises(ValueError, match="not a calibration file"):
        cost.load_params(str(bad))
    with pytest.raises(SystemExit):
        from collectives.virtual_time import calibrate

        calibrate.parse_args(["--repeats", "0"])


def test_describe_says_what_model_was_used():
    text = get_network("10gbe", ranks_per_node=4, topology="fattree", oversubscription=4).describe()
    assert "10GbE (alpha 12 us, 1.18 GB/s), fattree, oversubscription 4, 4 rank(s) per node" in text
    assert "shared memory within a node" in text and "gamma" in text
