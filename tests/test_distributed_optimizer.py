"""DistributedOptimizer features on the simulated communicator: accumulation, fusion, compression,
timings, optimizer-state broadcast, checkpoint/resume, and its error messages."""

from __future__ import annotations

import re

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.data.text import batchify, bptt_batches

collectives = pytest.importorskip("collectives")

from helpers.distributed_equivalence import (  # noqa: E402
    BPTT,
    CNN_N,
    LM_BATCH,
    assert_replicas_identical,
    assert_same_state,
    image_data,
    initial_state,
    lm_corpus,
    make_cnn,
    make_lm,
)

from collectives.common import TAG_CHECK  # noqa: E402  (the agreement check's messages)

pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def _cnn_step(model, opt, x, y, idx):
    opt.zero_grad()
    F.cross_entropy(model(minidl.tensor(x[idx])), y[idx]).backward()
    return opt.step()


# ----------------------------------------------------------------------------- accumulation
@pytest.mark.parametrize("P,k", [(2, 2), (3, 2), (1, 3)])
def test_accumulation_equals_k_times_bigger_batch(P, k):
    """k backward passes of batch b on P ranks, then one update == one step with batch k*P*b."""
    init = initial_state("cnn")
    x, y = image_data()
    b, updates = 2, 2

    ref = make_cnn()
    ref.load_state_dict(init)
    ref_opt = optim.SGD(ref.parameters(), lr=0.3, momentum=0.9)
    for _, idx in zip(range(updates), dist.DistributedSampler(CNN_N, k * P * b, seed=1, rank=0, size=1)):
        _cnn_step(ref, ref_opt, x, y, idx)

    def rank_fn(comm):
        dist.init(comm)
        model = make_cnn()
        model.load_state_dict(init)
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.3, momentum=0.9), backward_passes_per_step=k)
        results = []
        for _, idx in zip(range(updates * k), dist.DistributedSampler(CNN_N, b, seed=1)):
            will = opt.will_update
            results.append(_cnn_step(model, opt, x, y, idx))
            assert results[-1] == will
        return model.state_dict(), results, opt.timings.steps

    out = collectives.simulate(P, rank_fn)
    states = [s for s, _, _ in out]
    assert_replicas_identical(states)
    assert_same_state(states[0], ref.state_dict())
    assert out[0][1] == ([False] * (k - 1) + [True]) * updates
    assert out[0][2] == updates


def test_accumulation_guards():
    def rank_fn(comm):
        dist.init(comm)
        model = make_cnn()
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), backward_passes_per_step=2)
        x, y = image_data()
        _cnn_step(model, opt, x, y, np.arange(2))
        grads = [p.grad.copy() for p in model.parameters()]
        opt.zero_grad()  # mid-accumulation: must keep the gradients
        assert all(np.array_equal(p.grad, g) for p, g in zip(model.parameters(), grads))
        with pytest.raises(RuntimeError, match="allreduced only on the last pass"):
            # the next step() will update, so this one is fine; but first simulate a too-early call:
            opt._passes = 0
            opt.synchronize()
        with pytest.raises(RuntimeError, match="accumulated backward passes"):
            opt._passes = 1
            dist.save_checkpoint("/nonexistent/never-written.npz", model, opt)
        return True

    assert collectives.simulate(2, rank_fn) == [True, True]


# ----------------------------------------------------------------------------- fusion and compression
def test_fusion_packs_into_fewer_allreduces():
    def rank_fn(comm, fusion_bytes):
        dist.init(comm)
        model = make_lm()
        opt = dist.DistributedOptimizer(
            optim.SGD(model.parameters(), lr=0.1), fusion_bytes=fusion_bytes, measure_wait=False
        )
        for p in model.parameters():
            p.grad = np.ones_like(p.data)
        opt.step()
        return len(opt.buckets)

    n_params = len(list(make_lm().parameters()))
    for fusion_bytes, buckets in ((0, n_params), (dist.DEFAULT_FUSION_BYTES, 1)):
        out = collectives.simulate(2, rank_fn, fusion_bytes)
        assert out[0] == buckets
        # ring allreduce on 2 ranks: 2 messages per rank per bucket (reduce-scatter + allgather)
        sent = collectives.traffic(out.messages, 2, exclude_tags=[TAG_CHECK])[0]
        assert sent == [2 * buckets] * 2, (fusion_bytes, sent)


def test_fp16_compression_halves_the_bytes_and_stays_close():
    init = initial_state("cnn")
    x, y = image_data()

    def rank_fn(comm, compression):
        dist.init(comm)
        model = make_cnn()
        model.load_state_dict(init)
        opt = dist.DistributedOptimizer(
            optim.SGD(model.parameters(), lr=0.1), compression=compression, measure_wait=False
        )
        _cnn_step(model, opt, x, y, np.arange(4) + 4 * dist.rank())
        return model.state_dict()

    exact = collectives.simulate(2, rank_fn, None)
    half = collectives.simulate(2, rank_fn, "fp16")
    assert_replicas_identical(half)
    bytes_exact = sum(m.nbytes for m in exact.messages if m.tag != TAG_CHECK)
    bytes_half = sum(m.nbytes for m in half.messages if m.tag != TAG_CHECK)
    assert bytes_half * 4 == bytes_exact  # float64 gradients: 8 bytes -> 2 bytes on the wire
    assert_same_state(half[0], exact[0], rtol=2e-3)
    with pytest.raises(AssertionError):
        assert_same_state(half[0], exact[0], rtol=1e-8)


# ----------------------------------------------------------------------------- timings
def test_timings_breakdown_is_recorded():
    def rank_fn(comm):
        dist.init(comm)
        model = make_lm()
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1))
        data = batchify(lm_corpus(), LM_BATCH, dist.rank(), dist.size())
        for _, (x, y) in zip(range(3), bptt_batches(data, BPTT)):
            opt.zero_grad()
            logits, _ = model(x)
            F.cross_entropy(logits, y.reshape(-1)).backward()
            opt.step()
        return opt.timings

    t = collectives.simulate(2, rank_fn)[0]
    assert t.steps == 3
    assert t.total["compute"] > 0 and t.total["communication"] > 0 and t.total["wait"] >= 0
    assert "compute" in str(t) and "communication" in t.summary()


# ----------------------------------------------------------------------------- broadcasts
def test_broadcast_optimizer_state_and_parameters():
    def rank_fn(comm):
        dist.init(comm)
        minidl.manual_seed(0)
        model = make_cnn(batchnorm=True)
        opt = optim.Adam(model.parameters(), lr=0.01)
        if dist.rank() == 0:  # only the root has trained: Adam moments, step counts, a changed lr
            x, y = image_data()
            _cnn_step(model, opt, x, y, np.arange(4))
            opt.param_groups[0]["lr"] = 0.005
        dist.broadcast_parameters(model)
        dist.broadcast_optimizer_state(opt)
        sd = opt.state_dict()
        flat = {f"opt.{i}.{k}": np.asarray(v) for i, s in sd["state"].items() for k, v in s.items()}
        return {**model.state_dict(), **flat, "lr": np.array(sd["param_groups"][0]["lr"])}

    states = collectives.simulate(3, rank_fn)
    assert_replicas_identical(states)
    assert float(states[2]["lr"]) == 0.005 and "opt.0.exp_avg" in states[2]
    assert int(states[1]["1.num_batches_tracked"]) == 1  # buffers travel too


def test_broadcast_parameters_rejects_a_different_model():
    def rank_fn(comm):
        dist.init(comm)
        model = make_cnn(batchnorm=dist.rank() == 0)
        try:
            dist.broadcast_parameters(model)
        except (KeyError, ValueError) as e:
            return str(e)

    errors = collectives.simulate(2, rank_fn)
    # the layout fingerprint finds it before anything moves: the same error on both ranks
    assert errors[0] == errors[1] and "broadcast_parameters: ranks disagree" in errors[0], errors
    assert "first difference at parameter" in errors[0] and "ranks [1]" in errors[0]


@pytest.mark.parametrize("what", ["module", "dict", "optimizer"])
def test_broadcast_mismatch_raises_on_every_rank(what):
    """The root too must raise (not walk on into the next collective that the failed rank never joins)."""

    def rank_fn(comm):
        dist.init(comm)
        model = nn.Linear(3, 2 + (dist.rank() == 2))
        try:
            if what == "module":
                dist.broadcast_parameters(model)
            elif what == "dict":
                dist.broadcast_parameters({k: v.copy() for k, v in model.state_dict().items()})
            else:
                opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
                for p in model.parameters():
                    p.grad = np.ones_like(p.data)
                opt.step()
                dist.broadcast_optimizer_state(opt)
        except (KeyError, ValueError) as e:
            return type(e).__name__, str(e)
        return None

    errors = collectives.simulate(3, rank_fn)
    assert all(e is not None for e in errors), errors
    assert errors[0][0] == errors[1][0] == "MismatchError" and "ranks [2]" in errors[0][1]
    if what == "optimizer":
        assert errors[2][0] != "MismatchError"  # the failed rank keeps its own error
    else:  # parameters: the layout fingerprint, before anything moves, the same words on every rank
        assert errors[0] == errors[1] == errors[2], errors


def _optimizer(kind: str, model: nn.Module) -> optim.Optimizer:
    w, b = model.parameters()
    if kind == "sgd":
        return optim.SGD([w, b], lr=0.1, momentum=0.9)
    if kind == "two_groups":
        return optim.Adam([{"params": [w]}, {"params": [b], "lr": 0.001}], lr=0.01)
    if kind == "one_param":
        return optim.Adam([w], lr=0.01)
    opt = optim.Adam([w, b], lr=0.01)
    if kind == "extra_key":
        opt.param_groups[0]["initial_lr"] = 0.01  # as an LR scheduler adds it
    return opt


@pytest.mark.parametrize(
    "kind, difference",
    [
        (
            "sgd",
            r"optimizer class: Adam on the root \(per-parameter state \['exp_avg', 'exp_avg_sq', 'step'\]\), "
            r"SGD here",
        ),
        ("two_groups", r"1 parameter groups on the root, 2 here"),
        ("one_param", r"group 0: 2 parameters on the root, 1 here"),
        ("extra_key", r"group 0 hyperparameters: \[\] only on the root, \['initial_lr'\] only here"),
        ("wider", r"group 0 parameter 0: shape \(2, 3\) on the root, \(3, 3\) here"),
    ],
)
def test_broadcast_optimizer_state_mismatch_names_the_difference_on_every_rank(kind, difference):
    """Rank 2 builds another optimizer than the root's Adam (which has taken a step, so it has state).
    Rank 2 raises its ValueError naming the difference; the others a MismatchError quoting it."""

    def rank_fn(comm):
        dist.init(comm)
        odd = dist.rank() == 2
        model = nn.Linear(3, 3 if odd and kind == "wider" else 2)
        opt = _optimizer(kind.removesuffix("_wrapped") if odd else "adam", model)
        if kind.endswith("_wrapped"):
            opt = dist.DistributedOptimizer(opt)
        for p in model.parameters():
            p.grad = np.ones_like(p.data)
        opt.step()
        try:
            dist.broadcast_optimizer_state(opt)
        except ValueError as e:
            return type(e).__name__, str(e)
        return None

    out = collectives.simulate(3, rank_fn, timeout=20)
    assert all(o is not None for o in out), out
    assert out[0][0] == out[1][0] == "MismatchError" and out[2][0] == "ValueError", out
    assert all(re.search(difference, o[1]) for o in out), out
    assert "ranks [2] could not take the root's state" in out[0][1] and "rank 2" in out[2][1]


def test_wrapped_optimizers_of_another_class_fail_when_wrapped():
    """DistributedOptimizer compares the wrapped optimizers' classes (and hyperparameters) when it is built."""

    def rank_fn(comm):
        dist.init(comm)
        model = nn.Linear(3, 2)
        try:
            dist.DistributedOptimizer(_optimizer("sgd" if dist.rank() == 2 else "adam", model))
        except ValueError as e:
            return type(e).__name__, str(e)

    out = collectives.simulate(3, rank_fn, timeout=20)
    assert all(o is not None and o[0] == "MismatchError" for o in out), out
    assert (
        out[0] == out[1] == out[2] and "first difference at optimizer: ranks [0, 1]: Adam; ranks [2]: SGD" in out[0][1]
    )


# ----------------------------------------------------------------------------- checkpoints
def _lm_run(comm, init, ckpt, start_from, steps, save_at=None):
    """LM training with a per-rank random stream feeding the loss (a stand-in for dropout masks)."""
    dist.init(comm)
    model = make_lm()
    opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.5, momentum=0.9))
    sched = optim.lr_scheduler.StepLR(opt, step_size=2, gamma=0.5)
    rng = np.random.default_rng(100 + dist.rank())
    data = batchify(lm_corpus(), LM_BATCH, dist.rank(), dist.size())
    state, step = None, 0
    if start_from is None:
        if dist.rank() == 0:
            model.load_state_dict(init)
        dist.broadcast_parameters(model)
    else:
        shared, mine = dist.load_checkpoint(start_from, model, opt, sched)
        step = shared["step"]
        dist.set_rng_state(rng, mine["rng"])
        state = (minidl.tensor(mine["h"]), minidl.tensor(mine["c"]))
    windows = list(bptt_batches(data, BPTT))
    while step < steps:
        x, y = windows[step]
        opt.zero_grad()
        logits, state = model(x, state)
        state = model.detach_state(state)
        weights = minidl.tensor(rng.uniform(0.5, 1.5, size=logits.shape[0]))
        loss = (F.cross_entropy(logits, y.reshape(-1), reduction="none") * weights).mean()
        loss.backward()
        opt.step()
        sched.step()
        step += 1
        if step == save_at:
            dist.save_checkpoint(
                ckpt,
                model,
                opt,
                sched,
                state={"step": step},
                rank_state={"rng": dist.rng_state(rng), "h": state[0].data, "c": state[1].data},
            )
    return model.state_dict()


def test_checkpoint_resume_is_bitwise(tmp_path):
    init = initial_state("lm")
    ckpt = str(tmp_path / "ckpt.npz")
    straight = collectives.simulate(2, _lm_run, init, ckpt, None, 6)
    first = collectives.simulate(2, _lm_run, init, ckpt, None, 3, 3)
    resumed = collectives.simulate(2, _lm_run, init, ckpt, ckpt, 6)
    for r in range(2):
        for k in straight[r]:
            assert resumed[r][k].tobytes() == straight[r][k].tobytes(), (r, k)
        assert any(not np.array_equal(first[r][k], straight[r][k]) for k in straight[r])
    # and resuming with the wrong number of ranks is refused on every rank, not a hang
    with pytest.raises(ValueError, match="written by 2 ranks"):
        collectives.simulate(3, _lm_run, init, ckpt, ckpt, 6)


def test_missing_checkpoint_is_an_error_on_every_rank(tmp_path):
    def rank_fn(comm):
        dist.init(comm)
        try:
            dist.load_checkpoint(str(tmp_path / "nope.npz"), make_cnn())
        except FileNotFoundError:
            return "FileNotFoundError"
        except ValueError as e:
            return str(e)

    out = collectives.simulate(2, rank_fn)
    assert all("no checkpoint" in o for o in out), out


# ----------------------------------------------------------------------------- errors
def test_clear_errors():
    def rank_fn(comm):
        dist.init(comm)
        model = make_cnn()
        base = optim.SGD(model.parameters(), lr=0.1)
        with pytest.raises(ValueError, match="algorithm must be one of"):
            dist.DistributedOptimizer(base, allreduce="butterfly")
        with pytest.raises(ValueError, match="op must be one of"):
            dist.DistributedOptimizer(base, op="max")
        with pytest.raises(ValueError, match="backward_passes_per_step"):
            dist.DistributedOptimizer(base, backward_passes_per_step=0)
        with pytest.raises(TypeError, match="wraps a minidl optimizer"):
            dist.DistributedOptimizer(model)
        opt = dist.DistributedOptimizer(base)
        with pytest.raises(ValueError, match="closure"):
            opt.step(lambda: 0.0)
        mpi_opt = dist.DistributedOptimizer(base, allreduce="mpi")
        for p in model.parameters():
            p.grad = np.zeros_like(p.data)
        with pytest.raises(TypeError, match="needs an mpi4py communicator"):
            mpi_opt.step()
        return True

    assert collectives.simulate(2, rank_fn) == [True, True]


@pytest.mark.parametrize(
    "setting",
    [
        {"backward_passes_per_step": 2},
        {"op": "sum"},
        {"compression": "fp16"},
        {"allreduce": "tree"},
        {"fusion_bytes": 0},
        {"sparse_as_dense": True},
    ],
)
def test_ranks_with_different_settings_fail_at_construction(setting):
    """A rank accumulating 2 passes would skip the allreduce the others enter: a hang, unless caught up front."""

    def rank_fn(comm):
        model = nn.Linear(3, 2)
        kwargs = setting if comm.Get_rank() == 1 else {}
        try:
            dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), comm=comm, **kwargs)
        except ValueError as e:
            return str(e)
        return None

    errors = collectives.simulate(3, rank_fn, timeout=20)
    assert all(e is not None and "rank" in e and next(iter(setting)) in e for e in errors), errors
