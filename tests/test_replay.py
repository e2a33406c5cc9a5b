"""The virtual-time replay (collectives/virtual_time/replay.py): closed forms on crossbar, MPI's matching, deadlocks."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
from collectives import cost
from collectives.virtual_time.replay import DeadlockError, allreduce_time, replay
from collectives.virtual_time.trace import Event, trace

params_st = st.builds(
    cost.CostParams,
    alpha=st.floats(1e-7, 1e-4),
    beta=st.floats(1e-11, 1e-8),
    gamma=st.sampled_from([0.0, 1e-11, 3e-10, 2e-9]),
)


def close(a, b, rel=1e-9):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def blocks(algorithm, p):
    """How many blocks the algorithm cuts the vector into (1: it always sends whole vectors)."""
    return {"ring": p, "rabenseifner": 1 << (p.bit_length() - 1)}.get(algorithm, 1)


@settings(max_examples=60)
@given(
    algorithm=st.sampled_from(cost.ALGORITHMS),
    p=st.integers(1, 40),
    count=st.integers(0, 5000),
    params=params_st,
)
def test_crossbar_equals_the_closed_form(algorithm, p, count, params):
    """On crossbar, replaying the real code's trace gives cost.predict to 1e-9, for every p and size.

    cost.py's n/p assumes equal blocks. When the ring's p blocks (Rabenseifner's p' segments) are
    unequal, every message and reduction lies between those of the vector cut down to a multiple
    of the blocks and of the vector padded up to one; the replay is a max-plus system, monotone in
    the sizes, so its time lies between those two closed forms (equal to both when they are equal).
    """
    k = blocks(algorithm, p)
    if count % k == 0:
        assert close(
            allreduce_time(algorithm, p, 4 * count, params=params), cost.predict(algorithm, p, 4 * count, params)
        )
        return
    t = allreduce_time(algorithm, p, 4 * count, params=params)
    low, high = 4 * k * (count // k), 4 * k * -(-count // k)
    assert (
        cost.predict(algorithm, p, low, params) * (1 - 1e-9)
        <= t
        <= cost.predict(algorithm, p, high, params) * (1 + 1e-9)
    )


@pytest.mark.parametrize("algorithm", ["ring", "tree", "naive", "rabenseifner"])
@pytest.mark.parametrize("p", [2, 4, 8, 16])
def test_the_agreement_check_adds_its_predicted_cost(algorithm, p):
    """On powers of two every rank leaves the handshake at once, so its cost simply adds."""
    c = cost.CostParams(2e-6, 1e-9, 3e-10)
    t = allreduce_time(algorithm, p, 4 * 64 * 1024, params=c, check=True)
    assert close(t, cost.predict(algorithm, p, 4 * 64 * 1024, c) + cost.predict_check(p, c))


def test_short_recursive_doubling_rides_in_the_handshake():
    c, n, p = cost.CostParams(2e-6, 1e-9, 3e-10), 4096, 8
    t = allreduce_time("recursive_doubling", p, n, params=c, check=True)
    assert close(t, cost.predict_check(p, c) + 3 * n * c.beta + 3 * n * c.gamma)  # the check's messages + n bytes


def test_gather_s_root_receives_concurrently_on_crossbar():
    """naive.gather posts every Irecv at once: on crossbar (no shared links) the p - 1 messages overlap,
    alpha + m beta in all, where naive.py's (p - 1)(alpha + m beta) assumes the root takes one at a time.
    naive.allreduce receives with blocking Recv in rank order, so it pays (p - 1) steps (the closed form)."""
    c, m, p = cost.CostParams(1e-5, 1e-9, 0.0), 4000, 6
    assert close(replay(trace("gather", p, m), params=c).time, c.alpha + m * c.beta)
    assert close(replay(trace("scatter", p, m), params=c).time, c.alpha + m * c.beta)


def test_auto_is_the_cheapest_algorithm():
    c = cost.CostParams(5e-6, 3e-10, 7e-11)
    for n in (64, 1 << 16, 1 << 22):
        times = {a: allreduce_time(a, 12, n, params=c) for a in cost.ALGORITHMS}
        assert close(allreduce_time("auto", 12, n, params=c), times[collectives.choose_algorithm(12, n, c)[0]])


def test_isend_irecv_wait_and_matching_order():
    """Two messages with the same tag are taken in order; a Wait completes when its message has arrived."""
    sender = [Event("isend", 1, 5, 1000, request=0), Event("isend", 1, 5, 2000, request=1)]
    sender += [Event("wait", request=1), Event("wait", request=0)]
    receiver = [Event("recv", 0, 5, 1000), Event("reduce", nbytes=10), Event("recv", 0, 5, 2000)]
    result = replay([sender, receiver], params=cost.CostParams(1.0, 0.001, 0.5))
    # first message 0 -> 2 s; reduction 5 s -> 7 s; second message starts at 7: ends at 10
    assert np.allclose(result.finish, [10.0, 10.0]) and result.messages == 2


def test_deadlock_names_the_ranks_and_calls():
    traces = [[Event("recv", 1, 3, 8)], [Event("recv", 0, 3, 8)], []]
    with pytest.raises(
        DeadlockError, match=r"rank 0: blocked in Recv\(source=1, tag=3.*\n.*rank 1.*\n.*rank 2: finished"
    ):
        replay(traces)
    with pytest.raises(DeadlockError, match=r"never matched: rank 0 Isend\(dest=1"):
        replay([[Event("isend", 1, 0, 8, request=0)], []])


def test_bad_input():
    with pytest.raises(ValueError, match="truncated"):
        replay([[Event("send", 1, 0, 16)], [Event("recv", 0, 0, 8)]])
    with pytest.raises(ValueError, match="ANY_SOURCE"):
        replay([[Event("recv", -2, 0, 8)], [Event("send", 0, 0, 8)]])
    with pytest.raises(ValueError, match="unknown network 'infiniband'.*crossbar"):
        allreduce_time("ring", 4, 64, network="infiniband")
    with pytest.raises(ValueError, match="positive integer"):
        allreduce_time("ring", 0, 64)


# -- the vectorized rounds engine (collectives/virtual_time/rounds.py) against the event engine -------------------
NETWORKS = [
    ("crossbar", {}),
    ("10gbe", {}),
    ("25gbe", {"topology": "fattree", "leaf_size": 2, "oversubscription": 3}),
    ("ib-edr", {"topology": "torus2d"}),
    ("1gbe", {"ranks_per_node": 2}),
]


@settings(max_examples=40)
@given(
    algorithm=st.sampled_from(["ring", "recursive_doubling", "rabenseifner"]),
    p=st.sampled_from([1, 2, 3, 4, 6, 8, 12, 16]),
    count=st.integers(0, 3000),
    net=st.integers(0, len(NETWORKS) - 1),
)
def test_both_engines_agree_where_both_run(algorithm, p, count, net):
    """Exact on crossbar for every size; with shared links, exact when a round's messages are equal (they then
    start and end together, so the rounds engine's one sharing per round is the event engine's)."""
    from collectives.virtual_time.network import get_network
    from collectives.virtual_time.rounds import NotLockstep, replay_rounds, schedule_from_traces
    from collectives.virtual_time.trace import trace_rows

    name, options = NETWORKS[net]
    if name != "crossbar":
        count -= count % (p * 4)  # equal blocks and segments
    rows = trace_rows(algorithm, p, 4 * count)
    try:
        schedule = schedule_from_traces(rows)
    except NotLockstep:
        assert algorithm != "ring" and p & (p - 1)  # only the folds of non-powers of two are not lockstep
        return
    events = replay(rows, name, **options).finish
    rounds = replay_rounds(schedule, get_network(name, **options).fabric(p))
    assert np.allclose(rounds, events, rtol=1e-9, atol=0)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "rabenseifner"])
@pytest.mark.parametrize("p", [2, 4, 8, 16, 32])
def test_rank_0_relabelled_is_every_rank(algorithm, p):
    """symmetric_schedule builds the ranks' rounds from rank 0's trace: the same as tracing every rank."""
    from collectives.virtual_time.rounds import schedule_from_traces, symmetric_schedule
    from collectives.virtual_time.trace import trace_rows

    full = schedule_from_traces(trace_rows(algorithm, p, 4 * 64 * p))
    sym = symmetric_schedule(algorithm, p, 4 * 64 * p)
    assert full.rounds == sym.rounds
    for k in range(full.rounds):
        assert all((a == b).all() for a, b in zip(full.peers(k), sym.peers(k)))
    for a, b in ((full.nbytes, sym.nbytes), (full.reduced, sym.reduced)):
        assert (np.broadcast_to(b, a.shape) == a).all()


def test_rounds_engine_refuses_what_is_not_lockstep():
    from collectives.virtual_time.rounds import NotLockstep, symmetric_schedule

    assert symmetric_schedule("tree", 8, 64) is None
    assert symmetric_schedule("ring", 6, 4 * 7).blocks is not None  # 7 / 6: unequal blocks, rotating with the rank
    with pytest.raises(NotLockstep, match="not lockstep"):
        allreduce_time("tree", 8, 64, engine="rounds")
    c = cost.CostParams(1e-6, 1e-9, 1e-10)
    for algorithm in ("ring", "tree", "rabenseifner"):  # auto at p >= ROUNDS_FROM: rounds or events, same closed form
        assert close(
            allreduce_time(algorithm, 128, 4 * 128 * 10, params=c), cost.predict(algorithm, 128, 4 * 128 * 10, c)
        )


def test_a_p_that_does_not_fit_is_refused_before_starting():
    with pytest.raises(MemoryError, match=r"tree on p=1000000000 ranks needs about .* GiB"):
        allreduce_time("tree", 10**9, 1 << 20, "10gbe")
