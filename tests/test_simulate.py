"""minidl.simulate: the profile of a real step, the step model (with and without overlap), the CLI."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import collectives
import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from collectives import cost
from minidl import nn, optim
from minidl.simulate import (
    BucketProfile,
    Cluster,
    NodeSpec,
    Profile,
    allreduce_time,
    capture,
    described,
    gradient_clock,
    scaling,
    simulate_step,
    step_time,
)
from minidl.simulate.cli import main
from minidl.simulate.profile import fusion_plan
from minidl.simulate.step import STEP_SYNCS

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KEYS = {"nodes", "rate", "per_node_rate", "speedup", "efficiency", "step_s", "compute_s", "comm_s"}


def hand_profile(ready=(0.5, 1.5, 2.0), nbytes=(1000, 2000, 3000)) -> Profile:
    """Forward 1 s, backward 2 s, update 0.5 s, buckets ready at ``ready`` (s into the backward)."""
    buckets = tuple(BucketProfile(n, r) for n, r in zip(nbytes, ready))
    return Profile("hand-made", "items", 10, 1.0, 2.0, 0.5, buckets)


# ----------------------------------------------------------------------------- the profile
def tiny_mlp():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 32), nn.ReLU(), nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 3))


def test_profile_of_a_tiny_model():
    model = tiny_mlp()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x, y = np.random.default_rng(0).standard_normal((16, 8)).astype(np.float32), np.arange(16) % 3
    params = list(model.parameters())
    # about one layer's gradients per bucket: 8*32*4 = 1 KiB, 32*32*4 = 4 KiB
    prof = capture(
        "mlp", "items", 16, model, opt, lambda: F.cross_entropy(model(minidl.tensor(x)), y), opt.step, 4200, 3
    )
    assert prof.items == 16 and prof.forward_s > 0 and prof.backward_s > 0 and prof.update_s > 0
    # the sizes of DistributedOptimizer's plan: gradient bytes plus one presence flag per parameter
    assert prof.gradient_bytes == sum(p.data.nbytes + 4 for p in params)
    assert len(prof.buckets) >= 2
    ready = [b.ready_s for b in prof.buckets]
    assert all(0 <= r <= prof.backward_s for r in ready)
    # the output layer's gradients come first in the backward, the first layer's last
    plan = fusion_plan(optim.SGD(model.parameters(), lr=0.1), 4200)
    where = {id(p): k for k, b in enumerate(plan) for p in b.params}
    assert ready[where[id(model[4].weight)]] <= ready[where[id(model[0].weight)]]
    assert [b.nbytes for b in plan] == [b.nbytes for b in prof.buckets]
    assert all(b.pack_s > 0 for b in prof.buckets)


def test_gradient_clock_stamps_every_parameter_and_restores():
    import importlib

    module = importlib.import_module("minidl.autograd")
    original = module.accumulate_grad
    model = tiny_mlp()
    with gradient_clock() as stamps:
        model(minidl.tensor(np.ones((2, 8), np.float32))).sum().backward()
    assert module.accumulate_grad is original
    assert set(stamps) == {id(p) for p in model.parameters()}
    first, last = model[0].weight, model[4].weight
    assert stamps[id(last)] <= stamps[id(first)]


def test_profile_file_round_trip(tmp_path):
    prof = hand_profile()
    prof.save(tmp_path / "p.json")
    assert Profile.load(tmp_path / "p.json") == prof
    (tmp_path / "bad.json").write_text('{"task": "x"}')
    with pytest.raises(ValueError, match="not a profile"):
        Profile.load(tmp_path / "bad.json")


def test_described_profile():
    prof = described(25.6e6, 100.0, 64, fusion_bytes=32 * 2**20)
    assert prof.compute_s == pytest.approx(0.64)
    assert prof.backward_s == pytest.approx(2 * prof.forward_s)
    assert prof.gradient_bytes == int(25.6e6) * 4
    assert [b.nbytes for b in prof.buckets] == [32 * 2**20] * 3 + [102_400_000 - 96 * 2**20]
    assert prof.buckets[-1].ready_s < prof.buckets[0].ready_s == pytest.approx(prof.backward_s)


# ----------------------------------------------------------------------------- the step model
def test_step_algebra_without_and_with_overlap():
    prof = hand_profile()
    plain = step_time(prof, [0.4, 0.4, 0.4], overlap=False, barrier_s=0.1)
    assert plain.compute_s == 3.5
    assert plain.comm_s == pytest.approx(0.1 + 1.2)
    assert plain.step_s == pytest.approx(4.8)
    # overlap: bucket ready at 0.5 runs 1.5-1.9, the one at 1.5 runs 2.5-2.9, the last 3.0-3.4 (backward ends at 3)
    over = step_time(prof, [0.4, 0.4, 0.4], overlap=True)
    assert np.ravel(over.windows) == pytest.approx([1.5, 1.9, 2.5, 2.9, 3.0, 3.4])
    assert over.comm_s == pytest.approx(0.4)
    assert over.step_s == pytest.approx(3.9)
    # a long first bucket delays the others: 1.5-3.5, then 3.5-3.9, 3.9-4.3
    late = step_time(prof, [2.0, 0.4, 0.4], overlap=True)
    assert late.windows[2] == pytest.approx([3.9, 4.3]) and late.comm_s == pytest.approx(1.3)


@settings(max_examples=60, deadline=None)
@given(
    ready=st.lists(st.floats(0, 2.0), min_size=1, max_size=6),
    data=st.data(),
)
def test_overlap_is_never_slower_and_hides_at_most_the_backward(ready, data):
    prof = hand_profile(tuple(ready), tuple([100] * len(ready)))
    times = data.draw(st.lists(st.floats(0, 3.0), min_size=len(ready), max_size=len(ready)))
    plain, over = step_time(prof, times), step_time(prof, times, overlap=True)
    assert over.step_s <= plain.step_s + 1e-12
    assert over.comm_s >= sum(times) - prof.backward_s - 1e-12  # the backward is all there is to hide behind
    assert over.comm_s >= times[int(np.argmax(ready))] - 1e-12 or max(ready) < prof.backward_s


def test_crossbar_step_equals_the_closed_form():
    params = cost.CostParams(alpha=2e-6, beta=1e-9, gamma=2e-10)
    # float32 buckets that split into equal blocks for every p below (12480 = lcm of 2, 3, 5, 8, 13, 64)
    prof = hand_profile(nbytes=(4 * 12480, 8 * 12480, 12 * 12480))
    for algorithm in cost.ALGORITHMS:
        for p in (2, 3, 5, 8, 13, 64):
            t = simulate_step(prof, Cluster(p, "crossbar", params=params), algorithm)
            expected = sum(cost.predict(algorithm, p, b.nbytes, params) for b in prof.buckets)
            syncs = [call for calls in STEP_SYNCS.values() for call in calls]  # the step and stop agreements
            expected += sum(allreduce_time(a, p, n, "crossbar", params) for a, n in syncs)
            assert t.comm_s == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("p", [2, 3, 4, 5])
def test_the_simulated_syncs_are_a_real_steps_messages(p):
    """A steady step of DistributedOptimizer and the trainer's stop agreement, run on p in-process ranks, sends
    the messages the simulated step charges: STEP_SYNCS and the bucket's ring allreduce (counts and bytes)."""
    from collectives.virtual_time.trace import trace
    from minidl.distributed.strategy import Context
    from minidl.train.interrupt import Watch

    def steps(k):
        def fn(comm):
            minidl.manual_seed(0)
            model = nn.Linear(5, 3)
            opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), comm=comm, allreduce="ring")
            ctx, watch = Context(comm, comm.Get_rank(), comm.Get_size(), "ring"), Watch()
            for _ in range(k):
                opt.zero_grad()
                model(minidl.tensor(np.ones((2, 5), np.float32))).sum().backward()
                opt.step()
                watch.agreed(ctx)
            return opt.buckets[0].nbytes

        return fn

    first, both = (collectives.simulate(p, steps(k)) for k in (1, 2))
    step = sorted(m.nbytes for m in both.messages)
    for m in first.messages:  # the second step's messages: both runs' less the first's
        step.remove(m.nbytes)
    calls = [call for calls in STEP_SYNCS.values() for call in calls] + [("ring", first[0])]
    sent = [e.nbytes for a, n in calls for rank in trace(a, p, n) for e in rank if e.call in ("send", "sendrecv")]
    assert len(sent) == len(step) and sum(sent) == sum(step)


def test_auto_is_the_fastest_algorithm():
    for p, n in ((4, 1024), (16, 2**24), (7, 65536)):
        times = [allreduce_time(a, p, n) for a in cost.ALGORITHMS]
        assert allreduce_time("auto", p, n) == min(times)
    assert allreduce_time("ring", 1, 2**20) == 0.0
    with pytest.raises(ValueError, match="unknown allreduce"):
        allreduce_time("bogus", 4, 100)


def test_scaling_rows():
    rows = scaling(hand_profile(), [1, 2, 4, 32], "ring")
    assert rows[0].speedup == 1.0 and rows[0].efficiency == 1.0 and rows[0].comm_s == 0.0
    assert rows[0].rate == pytest.approx(10 / 3.5)
    for r in rows:
        assert r.rate == pytest.approx(r.nodes * 10 / r.step_s)
        assert r.efficiency == pytest.approx(r.speedup / r.nodes) and r.efficiency <= 1.0
        assert r.step_s == pytest.approx(r.compute_s + r.comm_s)
    assert [r.efficiency for r in rows] == sorted((r.efficiency for r in rows), reverse=True)


def test_node_description_scales_the_compute():
    prof = hand_profile()
    node = NodeSpec(ranks_per_node=1, cores=28, core_speed=0.5, efficiency=0.5)
    assert node.rank_speedup == 7.0
    fast = node.apply(prof)
    assert fast.compute_s == pytest.approx(3.5 / 7) and fast.buckets[0].ready_s == pytest.approx(0.5 / 7)
    assert "7x as fast" in node.describe(prof) and "3500.0 ms -> 500.00 ms" in node.describe(prof)
    assert NodeSpec(ranks_per_node=4, cores=2).rank_speedup == 0.5  # 4 ranks sharing 2 cores
    assert NodeSpec().apply(prof) is prof
    with pytest.raises(ValueError, match="--core-speed"):
        NodeSpec(core_speed=0)
    row = scaling(prof, [1], node=NodeSpec(ranks_per_node=2))[0]
    assert row.ranks == 2 and row.speedup == 1.0 and row.comm_s > 0  # two ranks allreduce inside the node


# ----------------------------------------------------------------------------- the command line
def test_cli_json_rows(capsys):
    assert main(["cnn", "--profile", "params=1e6,rate=200,batch=16", "--nodes", "1,2,8", "--json"]) == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["nodes"] for r in rows] == [1, 2, 8]
    assert all(KEYS <= set(r) for r in rows)
    assert rows[0]["speedup"] == 1.0 and rows[0]["comm_s"] == 0.0


def test_cli_measures_the_lm_and_compares_curves(capsys, tmp_path):
    pytest.importorskip("matplotlib")
    args = ["lm", "--preset", "quick", "--profile-steps", "1", "--nodes", "1,4", "--allreduce", "ring,tree"]
    assert main(args + ["--plot", str(tmp_path / "s.png"), "--save-profile", str(tmp_path / "p.json")]) == 0
    out = capsys.readouterr().out
    assert "words/s" in out and "weak scaling" in out and "measured on this machine" in out
    assert (tmp_path / "s.png").stat().st_size > 0
    assert Profile.load(tmp_path / "p.json").items == 100  # the quick preset: 10 streams x 10 words


@pytest.mark.parametrize("bad", ["0", "1,-2", "2.5", "four", "1,,2"])
def test_bad_node_counts_are_refused(bad, capsys):
    assert main(["lm", "--profile", "params=1e6,rate=1,batch=1", "--nodes", bad]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--nodes" in err[0] and "positive integer" in err[0]


def test_bad_flags_exit_2_with_one_line(capsys):
    env = {**os.environ, "PYTHONPATH": ROOT}
    out = subprocess.run(
        [sys.executable, "-m", "minidl.simulate", "lm", "--nodes", "1,x"], capture_output=True, text=True, env=env
    )
    assert out.returncode == 2 and out.stderr.strip().count("\n") == 0 and "--nodes" in out.stderr
    for flag, value, name in (("--allreduce", "fastest", "--allreduce"), ("--ranks-per-node", "0", "--ranks-per-node")):
        assert main(["lm", "--profile", "params=1e6,rate=1,batch=1", flag, value]) == 2
        assert name in capsys.readouterr().err
    assert main(["lm", "--profile", "params=1e6,rate=1,batch=1", "--network", "carrier-pigeon"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--network" in err[0] and "carrier-pigeon" in err[0]
