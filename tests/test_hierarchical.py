"""Hierarchical allreduce on simulated ranks: both schedules equal to NumPy, bitwise the same on every rank, and
their virtual time equal to the module doc's closed forms."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
from collectives import nodes
from collectives.algorithms import hierarchical
from collectives.cost import DEFAULT, CostParams
from collectives.nodes import hierarchical_allreduce, predict
from collectives.testing import check
from collectives.virtual_time.network import LINKS
from collectives.virtual_time.rounds import NotLockstep

LAYOUTS = [(4, 2), (6, 2), (6, 3), (9, 3), (4, 1), (4, 4), (2, 2), (8, 4), (12, 4)]  # (p, ranks per node)
REDUCE = {"sum": np.sum, "prod": np.prod, "max": np.max, "min": np.min}


@settings(max_examples=40, deadline=None)
@given(
    layout=st.sampled_from(LAYOUTS),
    schedule=st.sampled_from(hierarchical.SCHEDULES),
    n=st.integers(0, 40),
    seed=st.integers(0, 2**16),
    op=st.sampled_from(sorted(REDUCE)),
    dtype=st.sampled_from(["float64", "float32", "int64", "int32"]),
)
def test_matches_numpy_and_every_rank_agrees(layout, schedule, n, seed, op, dtype):
    p, k = layout
    rng = np.random.default_rng(seed)
    xs = (rng.standard_normal((p, n)) * 4).astype(dtype) if dtype[0] == "f" else rng.integers(-3, 4, (p, n), dtype)
    if op == "prod" and dtype[0] == "f":
        xs = (1 + rng.random((p, n)) / 4).astype(dtype)  # no overflow, no cancellation
    out = collectives.simulate(
        p, lambda comm: hierarchical_allreduce(comm, xs[comm.Get_rank()], op, ranks_per_node=k, schedule=schedule)
    )
    want = REDUCE[op](xs.astype("float64" if dtype[0] == "f" else dtype), axis=0)
    assert out[0].dtype == np.dtype(dtype) and out[0].shape == (n,)
    if dtype[0] == "i" or op in ("max", "min"):
        np.testing.assert_array_equal(out[0], want.astype(dtype))  # exact
    else:
        # a sum that nearly cancels has a relative error above rtol: allow p roundings of the largest term too
        atol = p * np.finfo(dtype).eps * float(np.abs(xs).max(initial=0))
        np.testing.assert_allclose(out[0], want, rtol=1e-12 if dtype == "float64" else 1e-5, atol=atol)
    assert all(o.tobytes() == out[0].tobytes() for o in out)  # bitwise the same on every rank


@pytest.mark.parametrize("schedule", hierarchical.SCHEDULES)
def test_shape_and_integer_dtype_are_kept(schedule):
    xs = np.arange(6 * 2 * 3, dtype=np.int64).reshape(6, 2, 3)
    out = collectives.simulate(
        6, lambda comm: hierarchical_allreduce(comm, xs[comm.Get_rank()], ranks_per_node=3, schedule=schedule)
    )
    assert out[0].dtype == np.int64 and out[0].shape == (2, 3) and np.array_equal(out[5], xs.sum(axis=0))


@pytest.mark.parametrize("p, k", [(6, 3), (9, 3), (8, 2), (4, 4), (4, 1)])
def test_only_the_leaders_use_the_network_in_the_leader_schedule(p, k):
    """The leader schedule: every message between nodes is between two local ranks 0; inside a node the tree's
    k - 1 messages up and k - 1 down. The rs schedule: every local rank sends across the nodes."""
    n = 12
    xs = np.ones((p, n))

    def messages(schedule):
        run = collectives.simulate(
            p,
            lambda comm: hierarchical_allreduce(
                comm, xs[comm.Get_rank()], ranks_per_node=k, schedule=schedule, check=False
            ),
        )
        return [(m.source, m.dest) for m in run.messages]

    leader = messages("leader")
    across = [(a, b) for a, b in leader if a // k != b // k]
    inside = [(a, b) for a, b in leader if a // k == b // k]
    assert all(a % k == 0 and b % k == 0 for a, b in across)
    assert len(across) == (2 * (p // k) * (p // k - 1) if p > k else 0)  # a ring among the N leaders
    assert len(inside) == 2 * (k - 1) * (p // k)
    rs = messages("rs")
    senders = {a % k for a, b in rs if a // k != b // k}
    assert senders == (set(range(k)) if p > k else set())


def test_the_names_mean_the_schedules():
    assert hierarchical.NAMES == {"hierarchical": "leader", "hierarchical_rs": "rs"}


def test_the_schedules_use_point_to_point_calls_only_and_old_imports_still_work():
    """algorithms/ holds schedules on point-to-point calls; the communicators and the checked entry point moved to
    collectives/nodes.py, and the names imported from the old place are the same objects."""
    import ast
    import inspect

    tree = ast.parse(inspect.getsource(hierarchical))
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert not imported & {"collectives.dispatch", "collectives.agreement", "collectives.auto", "mpi4py"}
    from collectives.algorithms.hierarchical import GroupComm, hierarchical_allreduce, node_comms

    assert (GroupComm, hierarchical_allreduce, node_comms) == (
        nodes.GroupComm,
        nodes.hierarchical_allreduce,
        nodes.node_comms,
    )
    assert hierarchical.allreduce is nodes.allreduce and hierarchical.free is nodes.free
    with pytest.raises(AttributeError):
        hierarchical.no_such_name


def test_nodes_of_unequal_size_bad_groupings_and_names_are_refused():
    with pytest.raises(ValueError, match="ranks_per_node=4 must divide the 6 ranks"):
        collectives.simulate(6, lambda comm: hierarchical_allreduce(comm, np.ones(3), ranks_per_node=4))
    with pytest.raises(ValueError, match="unknown schedule 'ring'"):
        collectives.simulate(
            4, lambda comm: hierarchical_allreduce(comm, np.ones(3), ranks_per_node=2, schedule="ring")
        )
    with pytest.raises(ValueError, match="unknown algorithm 'fast'"):
        collectives.simulate(
            4, lambda comm: hierarchical_allreduce(comm, np.ones(3), ranks_per_node=2, algorithm="fast")
        )


def test_ranks_that_disagree_on_the_schedule_get_a_mismatch_on_every_rank():
    def run(comm):
        schedule = "leader" if comm.Get_rank() else "rs"
        return hierarchical_allreduce(comm, np.ones(3), ranks_per_node=2, schedule=schedule)

    with pytest.raises(collectives.MismatchError):
        collectives.simulate(4, run)


@pytest.mark.parametrize("algorithm", ["tree", "recursive_doubling", "rabenseifner", "naive", "auto"])
@pytest.mark.parametrize("schedule", hierarchical.SCHEDULES)
def test_any_allreduce_across_the_nodes(algorithm, schedule):
    xs = np.arange(12 * 7, dtype=np.int64).reshape(12, 7) - 40
    out = collectives.simulate(
        12,
        lambda comm: hierarchical_allreduce(
            comm, xs[comm.Get_rank()], ranks_per_node=2, algorithm=algorithm, schedule=schedule
        ),
    )
    assert all(np.array_equal(o, xs.sum(axis=0)) for o in out)


def _smallest_factor(p: int) -> int:
    return next(d for d in range(2, p + 1) if p % d == 0) if p > 1 else 1


@pytest.mark.parametrize("schedule", hierarchical.SCHEDULES)
def test_the_property_kit_passes_both_schedules(schedule):
    """The kit draws p from 1 to 16: nodes of p's smallest prime factor (k = p for a prime: one node)."""

    def fn(comm, x, f):
        return nodes.allreduce(comm, x, f, _smallest_factor(comm.Get_size()), schedule=schedule)

    assert check(fn, "allreduce", examples=25).examples > 25


# -- virtual time ---------------------------------------------------------------------------------
INSIDE = CostParams(5e-6, 3e-10, 2e-10)  # the link within a node (as calibrated here), and gamma
ACROSS = CostParams(LINKS["10gbe"].alpha, LINKS["10gbe"].beta, INSIDE.gamma)
NAME = {"leader": "hierarchical", "rs": "hierarchical_rs"}


@pytest.mark.parametrize("schedule", hierarchical.SCHEDULES)
@pytest.mark.parametrize("p, k", [(8, 2), (12, 4), (16, 16), (6, 1), (32, 8), (24, 4)])
def test_virtual_time_equals_the_closed_form(p, k, schedule):
    """allreduce_time replays the real schedule: the module doc's T to 1e-9 on even blocks (crossbar: no sharing)."""
    nbytes, net = 4 * p * 1000, {"ranks_per_node": k, "topology": "crossbar"}
    got = collectives.allreduce_time(NAME[schedule], p, nbytes, "10gbe", INSIDE, **net)
    assert got == pytest.approx(predict(p, k, nbytes, INSIDE, ACROSS, schedule), rel=1e-9)
    ring = collectives.allreduce_time("ring", p, nbytes, "10gbe", INSIDE, **net)
    assert (got < ring) == (1 < k < p) or k == 1  # fewer network latencies once a node holds several ranks


def test_the_closed_forms_differ_and_each_schedule_wins_somewhere():
    """The leader pays 2 log2 k latencies inside, the rs 2 (k - 1); the rs moves k times fewer bytes across."""
    small = {s: predict(64, 8, 64, INSIDE, ACROSS, s) for s in hierarchical.SCHEDULES}
    large = {s: predict(64, 8, 64 << 20, INSIDE, ACROSS, s) for s in hierarchical.SCHEDULES}
    assert small["leader"] < small["rs"] and large["rs"] < large["leader"]
    with pytest.raises(ValueError, match="unknown schedule"):
        predict(8, 2, 64, INSIDE, ACROSS, "flat")


def test_the_module_doc_s_example_of_which_wins():
    """The numbers of hierarchical.py's doc: 64 ranks in nodes of 8 on 10GbE (one switch), in microseconds (gamma:
    cost.py's default)."""
    doc = {64: (198, 238), 16 << 10: (256, 272), 64 << 10: (431, 374), 1 << 20: (3925, 2416)}
    for nbytes, want in doc.items():
        got = [
            collectives.allreduce_time(name, 64, nbytes, "10gbe", DEFAULT, ranks_per_node=8) for name in NAME.values()
        ]
        assert np.round(np.array(got) * 1e6) == pytest.approx(want, abs=1), nbytes


@pytest.mark.parametrize("name", list(NAME.values()))
def test_virtual_time_traces_uneven_blocks_and_the_check(name):
    """n not a multiple of k (unequal blocks), with the one agreement check."""
    t = collectives.allreduce_time(name, 6, 4 * 7, "10gbe", check=True, ranks_per_node=3)
    assert t > collectives.allreduce_time(name, 6, 4 * 7, "10gbe", ranks_per_node=3) > 0


@pytest.mark.parametrize(
    "p, k, nbytes, rel", [(64, 4, 4 * 64 * 10, 1e-9), (128, 16, 1 << 20, 1e-9), (96, 8, 4 * 1001, 0.01)]
)
def test_rs_rounds_replay_equals_the_event_replay(p, k, nbytes, rel):
    """From p = 64 on, allreduce_time replays the rs rounds from a sample of traced ranks (node and local rank
    shifted together): the time of every rank traced and replayed event by event. With unequal blocks (n not a
    multiple of p) a round's flows are shared as if they ended together: within 1% here."""
    kw = {"ranks_per_node": k, "topology": "fattree", "leaf_size": 4}
    rounds = collectives.allreduce_time("hierarchical_rs", p, nbytes, "10gbe", engine="rounds", **kw)
    events = collectives.allreduce_time("hierarchical_rs", p, nbytes, "10gbe", engine="events", **kw)
    assert rounds == pytest.approx(events, rel=rel)


LEADER_CASES = [
    (64, 4, 4 * 64 * 10, {}),
    (64, 4, 4 * 1001, {"topology": "fattree", "leaf_size": 4}),
    (128, 16, 1 << 20, {"topology": "fattree", "leaf_size": 4, "oversubscription": 2.0}),
    (96, 8, 4 * 1001, {"topology": "crossbar"}),
    (64, 2, 1 << 16, {"topology": "torus2d", "dims": [4, 8]}),
    (128, 4, 1 << 16, {"link_latency": 1e-6}),
    (72, 3, 4 * 999, {"topology": "fattree", "leaf_size": 8, "link_latency": 2e-6, "sharing": "rtt"}),
    (64, 64, 1 << 12, {}),
    (64, 1, 1 << 12, {"topology": "fattree", "leaf_size": 8}),
]


@pytest.mark.parametrize("p, k, nbytes, options", LEADER_CASES)
def test_leader_replay_by_parts_equals_the_full_event_replay(p, k, nbytes, options):
    """The leader schedule is no relabelling of rank 0 (only the nodes are alike) and its trees are no Sendrecv
    rounds: from p = 64 on it is replayed by its parts (one node's tree allreduce plus the leaders' ring,
    replay._leader_time), held here to every rank traced and replayed event by event."""
    kw = {"ranks_per_node": k, **options}
    events = collectives.allreduce_time("hierarchical", p, nbytes, "10gbe", engine="events", **kw)
    for engine in ("auto", "rounds"):
        got = collectives.allreduce_time("hierarchical", p, nbytes, "10gbe", engine=engine, **kw)
        assert got == pytest.approx(events, rel=1e-12, abs=0)


def test_the_leader_trace_is_not_lockstep():
    from collectives.virtual_time.rounds import symmetric_schedule
    from collectives.virtual_time.trace import trace_rows

    assert symmetric_schedule("hierarchical:4", 64, 4 * 64) is None  # the event engine, or replay by parts
    assert symmetric_schedule("hierarchical_rs:4", 64, 4 * 64) is not None
    with pytest.raises(NotLockstep):
        collectives.allreduce_time("hierarchical", 8, 64, "10gbe", engine="rounds", check=True, ranks_per_node=2)
    assert len(trace_rows("hierarchical:4", 8, 64)[1]) < len(trace_rows("hierarchical_rs:4", 8, 64)[1])


def test_leader_schedule_at_a_thousand_ranks_is_quick():
    import time

    start = time.perf_counter()
    t = collectives.allreduce_time("hierarchical", 1024, 100 << 20, "10gbe", ranks_per_node=2)
    assert t > 0 and time.perf_counter() - start < 5.0  # the full event replay takes about 40 s


def test_the_simulator_s_auto_takes_a_hierarchical_schedule_where_it_is_fastest():
    from minidl.simulate.network import allreduce_time

    kw = {"ranks_per_node": 8}
    times = {a: allreduce_time(a, 64, 1 << 16, "10gbe", **kw) for a in ("auto", "hierarchical", "hierarchical_rs")}
    flat = collectives.allreduce_time("auto", 64, 1 << 16, "10gbe", **kw)  # the fastest of cost.ALGORITHMS
    assert times["auto"] == min(flat, times["hierarchical"], times["hierarchical_rs"]) < flat
    assert allreduce_time("auto", 64, 1 << 16, "10gbe") == collectives.allreduce_time("auto", 64, 1 << 16, "10gbe")


@pytest.mark.parametrize("algorithm, schedule", [("hierarchical", "leader"), ("hierarchical_rs", "rs")])
def test_the_data_parallel_allreduce_runs_the_named_schedule(algorithm, schedule, monkeypatch):
    """dist.allreduce (the DistributedOptimizer's) sends the messages of hierarchical.py's schedule of that name."""
    import minidl.distributed as dist

    monkeypatch.setenv("MINIDL_RANKS_PER_NODE", "3")
    xs = np.arange(6 * 10, dtype=np.float64).reshape(6, 10)

    def pairs(fn):
        run = collectives.simulate(6, fn)
        assert all(np.array_equal(o, xs.sum(axis=0)) for o in run)
        return sorted((m.source, m.dest, m.nbytes) for m in run.messages)

    got = pairs(lambda comm: dist.allreduce(comm, xs[comm.Get_rank()], algorithm, check=False))
    want = pairs(
        lambda comm: hierarchical_allreduce(comm, xs[comm.Get_rank()], ranks_per_node=3, schedule=schedule, check=False)
    )
    assert got == want


def test_communicators_get_sendrecv_from_one_base_each():
    """GroupComm and BytesComm pass Sendrecv on as one Sendrecv (a trace keeps one row); TimeoutComm builds it from
    Irecv, Isend and its deadline, and a Sendrecv that waits past it is named in the error."""
    from collectives.communicators import CommView, NonblockingSendrecv
    from collectives.wire_format import BytesComm
    from minidl.distributed.timeout import CommTimeoutError, TimeoutComm

    assert issubclass(nodes.GroupComm, CommView) and issubclass(BytesComm, CommView)
    assert issubclass(TimeoutComm, NonblockingSendrecv)

    def stuck(comm):
        if comm.Get_rank() == 0:  # rank 1 never sends: rank 0's Sendrecv runs into the deadline
            TimeoutComm(comm, 0.2).Sendrecv(np.zeros(1), 1, 5, np.zeros(1), 1, 5)

    with pytest.raises(CommTimeoutError, match="Sendrecv"):
        collectives.simulate(2, stuck)
