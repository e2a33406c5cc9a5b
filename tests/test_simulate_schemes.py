"""minidl.simulate beyond the dense allreduce: sparse rows, stragglers and jitter, the other parallel schemes.

Each against a closed form on the crossbar (every message alpha + n beta, no contention)."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from collectives import cost
from collectives.cost import CostParams
from minidl.simulate import BucketProfile, Cluster, Profile, TaskOptions, profile_task, scaling, simulate_step
from minidl.simulate.cli import main
from minidl.simulate.schemes import Scheme, Variation, bubble

C = CostParams(alpha=10e-6, beta=1e-9, gamma=2e-10)
A = 1_024_000  # activation bytes: blocks that split evenly up to p = 64 (float32), also in 4 time steps


def ring_allgather(p: int, nbytes: float) -> float:
    return (p - 1) * (C.alpha + nbytes * C.beta)


@pytest.mark.parametrize("p", [2, 4, 16])
def test_rows_exchange_is_three_allgathers_or_the_dense_allreduce(p):
    """sparse_rows.exchange_rows: counts (with their check), ids, rows, the adds; dense when K = p k > V / 2."""
    V, k, row = 1000, 30, 800
    bucket = BucketProfile(V * row, 0.0, rows=k, row_bytes=row)
    cluster = Cluster(p, "crossbar", params=C)
    counts = ring_allgather(p, 16) + cost.predict("recursive_doubling", p, 112, C)
    if p * k <= V / 2:
        want = counts + ring_allgather(p, 8 * k) + ring_allgather(p, k * row) + p * k * row * C.gamma
    else:
        want = counts + cost.predict("ring", p, V * row, C)
    assert cluster.exchange_s("ring", bucket) == pytest.approx(want, rel=1e-9)
    dense = BucketProfile(V * row, 0.0)
    assert cluster.exchange_s("ring", dense) == pytest.approx(cost.predict("ring", p, V * row, C), rel=1e-9)


def test_sparse_embedding_profile_has_a_rows_bucket():
    prof = profile_task("lm", TaskOptions(sparse_embedding=True, steps=1, batch_size=2, num_steps=3))
    (rows,) = [b for b in prof.buckets if b.rows]
    assert rows.row_bytes == 200 * 4 and 1 <= rows.rows <= 6  # the demo's 200 floats a row; 6 words looked up
    with pytest.raises(ValueError, match="only to the language model"):
        profile_task("cnn", TaskOptions(sparse_embedding=True))


def test_cli_sparse_embedding_flag(capsys):
    assert main(["cnn", "--sparse-embedding", "--nodes", "1,2", "--profile-steps", "1"]) == 2
    assert "only to the language model" in capsys.readouterr().err
    assert main(["lm", "--sparse-embedding", "--profile", "params=1e6,rate=100,batch=4"]) == 2
    assert "--sparse-embedding" in capsys.readouterr().err


# -- stragglers and jitter ------------------------------------------------------------------------------
def test_the_slowest_of_p_ranks_with_stragglers():
    """No jitter: max_r f_r is the slowdown when any of the p ranks straggles, 1 - (1 - f)^p of the steps."""
    f, s = 0.01, 3.0
    for p in (1, 16, 256):
        got = Variation(straggler=f, slowdown=s, draws=4000).wait(p)
        assert got == pytest.approx(1 + (s - 1) * (1 - (1 - f) ** p), abs=0.03)
    assert Variation().wait(1024) == 1.0 and Variation(straggler=0.5).wait(64) == 1.0  # slowdown 1: no one waits


def test_jitter_has_mean_one_and_its_cv_and_local_steps_average_it_out():
    v = Variation(jitter=0.2, draws=50)
    f = v.factors(400)
    assert f.mean() == pytest.approx(1.0, abs=0.01) and f.std() / f.mean() == pytest.approx(0.2, abs=0.01)
    assert 1 < v.wait(64, 8) < v.wait(64, 1)  # the slowest mean of 8 steps is closer to 1 than of 1
    with pytest.raises(ValueError, match="slowdown >= 1"):
        Variation(straggler=0.1, slowdown=0.5)


def test_a_synchronous_step_waits_for_the_slowest_rank():
    prof = hand_profile()
    v = Variation(straggler=0.02, slowdown=2.0)
    cluster = Cluster(64, "crossbar", params=C)
    plain = simulate_step(prof, cluster, "ring")
    got = simulate_step(prof, cluster, "ring", scheme=Scheme("data", "ring", variation=v))
    assert got.compute_s == pytest.approx(prof.compute_s * v.wait(64), rel=1e-12)
    assert got.comm_s == pytest.approx(plain.comm_s, rel=1e-12)  # the allreduces are the same


# -- the other schemes against their closed forms --------------------------------------------------------
def hand_profile() -> Profile:
    """F 1 s, B 2 s, U 0.5 s, 4 MB of gradients in two buckets, A bytes of activations, 3 layers."""
    buckets = (BucketProfile(1_000_000, 0.5), BucketProfile(3_000_000, 2.0))
    return Profile("hand", "items", 32, 1.0, 2.0, 0.5, buckets, activation_bytes=A, layers=3)


@pytest.mark.parametrize("W, S", [(1, 1), (16, 1), (64, 4)])
def test_parameter_servers(W, S):
    prof, cluster, n = hand_profile(), Cluster(W, "crossbar", params=C), 4_000_000
    v = Variation(straggler=0.05, slowdown=2.0)
    sync = simulate_step(prof, cluster, scheme=Scheme("ps", servers=S, variation=v))
    shard = n / S
    want = 3.0 * v.wait(W) + 2 * (C.alpha + W * shard * C.beta) + W * shard * C.gamma + 0.5 / S
    assert sync.step_s == pytest.approx(want, rel=1e-12)
    free = simulate_step(prof, cluster, scheme=Scheme("ps-async", servers=S, variation=v))
    cycle = 3.0 * v.mean() + 2 * (C.alpha + n * C.beta)
    service = 2 * shard * C.beta + shard * C.gamma + 0.5 / S
    assert free.step_s == pytest.approx(max(cycle, W * service), rel=1e-12)


@pytest.mark.parametrize("P, m", [(1, 4), (4, 1), (4, 8), (16, 32)])
@pytest.mark.parametrize("schedule", ["gpipe", "1f1b"])
def test_pipeline_bubble_is_p_minus_1_over_m_plus_p_minus_1(P, m, schedule):
    prof = replace(hand_profile(), update_s=0.0)
    free = Cluster(P, "crossbar", params=CostParams(0.0, 0.0, 0.0))
    t = simulate_step(prof, free, scheme=Scheme("pipeline", microbatches=m, schedule=schedule))
    busy = (prof.forward_s + prof.backward_s) / P  # each stage's own work
    assert 1 - busy / t.step_s == pytest.approx(bubble(P, m), abs=1e-12) == pytest.approx((P - 1) / (m + P - 1))
    paid = simulate_step(hand_profile(), Cluster(P, "crossbar", params=C), scheme=Scheme("pipeline", microbatches=m))
    send = 2 * (C.alpha + A / m * C.beta) if P > 1 else 0.0
    assert paid.step_s == pytest.approx((m + P - 1) * (3.0 / (P * m) + send) + 0.5 / P, rel=1e-12)


@pytest.mark.parametrize("P", [1, 8, 64])
@pytest.mark.parametrize("k", [1, 4])
def test_tensor_parallel_step(P, k):
    """Two allreduces per layer, or per layer and time step (k) of an RNN, of A / k bytes."""
    prof = replace(hand_profile(), sequential=k)
    t = simulate_step(prof, Cluster(P, "crossbar", params=C), scheme=Scheme("tensor", "ring"))
    comm = 2 * 3 * k * cost.predict("ring", P, A / k, C) if P > 1 else 0.0
    assert t.step_s == pytest.approx(3.5 / P + comm, rel=1e-9)


def test_local_sgd_averages_once_per_h_steps():
    v = Variation(jitter=0.3)
    t = simulate_step(
        hand_profile(), Cluster(32, "crossbar", params=C), scheme=Scheme("local-sgd", local_steps=4, variation=v)
    )
    assert t.step_s == pytest.approx(3.5 * v.wait(32, 4) + cost.predict("ring", 32, 4_000_000, C) / 4, rel=1e-12)


def test_strong_schemes_scale_one_batch():
    rows = scaling(hand_profile(), [1, 4], "ring", "crossbar", params=C, scheme=Scheme("pipeline", microbatches=8))
    assert rows[0].rate == pytest.approx(32 / 3.5) and rows[1].rate == pytest.approx(32 / rows[1].step_s)


@pytest.mark.parametrize(
    "flags, message",
    [
        (["--straggler", "0.01"], "FRACTION:SLOWDOWN"),
        (["--straggler", "2:3"], "--straggler"),
        (["--jitter", "-1"], "--jitter"),
        (["--parallel", "gossip"], "--parallel: unknown gossip"),
        (["--parallel", "ps", "--servers", "0"], "servers"),
    ],
)
def test_cli_refuses_bad_scheme_flags(flags, message, capsys):
    assert main(["lm", "--profile", "params=1e6,rate=100,batch=4", *flags]) == 2
    assert message in capsys.readouterr().err


def test_cli_compares_schemes_with_a_straggler(capsys):
    argv = ["lm", "--profile", "params=1e6,rate=100,batch=4", "--nodes", "1,256", "--straggler", "0.01:2", "--json"]
    assert main([*argv, "--parallel", "data,ps-async,local-sgd", "--servers", "16"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    eff = {r["algorithm"].split()[0]: r["efficiency"] for r in rows if r["nodes"] == 256}
    assert eff["data"] < eff["local-sgd"] and eff["data"] < eff["ps-async"]  # who waits for the straggler loses


def test_cli_offers_hierarchical_and_describes_activations(capsys):
    base = ["lm", "--profile", "params=1e6,rate=100,batch=4,activation_mb=0.5,layers=2", "--nodes", "1,4", "--json"]
    assert main([*base, "--allreduce", "ring,hierarchical,hierarchical_rs", "--ranks-per-node", "2"]) == 0
    assert main([*base, "--parallel", "pipeline,tensor"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    names = {"ring", "hierarchical", "hierarchical_rs", "pipeline 1f1b m=8", "tensor ring"}
    assert {r["algorithm"] for r in rows} == names
    assert main(["lm", "--profile", "params=1e6,rate=100,batch=4", "--parallel", "tensor"]) == 2
    assert "no activation bytes" in capsys.readouterr().err
