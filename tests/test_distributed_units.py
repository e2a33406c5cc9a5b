"""Unit tests of minidl.distributed's single-rank parts: wire format, fusion, compression, timing, sampler."""

import json
import threading

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl.distributed as dist
from minidl.distributed import wire
from minidl.distributed.data_parallel import compression, fusion
from minidl.nn import Parameter


# ----------------------------------------------------------------------------- wire
def test_wire_round_trip_nested_state():
    tree = {
        "state": {0: {"step": 3, "momentum_buffer": np.arange(6.0).reshape(2, 3)}, 1: {"exp_avg": np.ones(0)}},
        "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "nesterov": False, "params": [0, 1], "x": None}],
        "ints": np.array([1, 2, 3], dtype=np.int16),
        "f32": np.float32(1.5),
        "scalar_array": np.array(2.5),
        "name": "ring",
    }
    out = wire.decode(wire.encode(tree))
    assert out["state"]["0"]["step"] == 3
    np.testing.assert_array_equal(out["state"]["0"]["momentum_buffer"], tree["state"][0]["momentum_buffer"])
    assert out["state"]["1"]["exp_avg"].shape == (0,)
    assert out["param_groups"][0]["betas"] == [0.9, 0.999]
    assert out["param_groups"][0]["x"] is None and out["param_groups"][0]["nesterov"] is False
    assert out["ints"].dtype == np.int16 and out["f32"] == 1.5 and out["name"] == "ring"
    assert out["scalar_array"].shape == () and out["scalar_array"] == 2.5


@settings(max_examples=30)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["<f8", "<f4", "<i8", "|u1", "<f2", ">i4"]),
            st.lists(st.integers(0, 4), max_size=3),
        ),
        max_size=5,
    )
)
def test_wire_arrays_bitwise(specs):
    rng = np.random.default_rng(1)
    arrays = {f"a{i}": np.asarray(rng.standard_normal(shape) * 100).astype(dt) for i, (dt, shape) in enumerate(specs)}
    out = wire.decode(wire.encode(arrays))
    for k, v in arrays.items():
        assert out[k].dtype == v.dtype and out[k].shape == v.shape
        assert out[k].tobytes() == v.tobytes()


def test_wire_refuses_objects_and_bad_buffers():
    with pytest.raises(TypeError, match="only numeric arrays"):
        wire.encode({"a": np.array([object()])})
    with pytest.raises(TypeError, match="cannot send a set"):
        wire.encode({"a": {1, 2}})
    with pytest.raises(ValueError, match="too short"):
        wire.decode(np.zeros(3, np.uint8))
    with pytest.raises(ValueError, match="does not fit"):
        wire.decode(np.array([200, 0, 0, 0, 0, 0, 0, 0, 1], np.uint8))


# ----------------------------------------------------------------------------- fusion
def _params(shapes, dtype=np.float64):
    return [Parameter(np.zeros(s, dtype=dtype)) for s in shapes]


def test_plan_buckets_respects_threshold_and_order():
    ps = _params([(10,), (20,), (5, 2), (40,), (1,)])  # 80, 160, 80, 320, 8 bytes
    buckets = fusion.plan_buckets(ps, fusion_bytes=250)
    assert [len(b.params) for b in buckets] == [2, 1, 1, 1]
    assert [p for b in buckets for p in b.params] == ps  # deterministic: parameter order
    assert buckets[0].offsets == [0, 10] and buckets[0].numel == 30
    one_each = fusion.plan_buckets(ps, 0)
    assert len(one_each) == len(ps)
    all_in_one = fusion.plan_buckets(ps, 2**20)
    assert len(all_in_one) == 1 and all_in_one[0].numel == 81 and all_in_one[0].length == 86


def test_plan_buckets_splits_by_dtype():
    ps = _params([(3,)], np.float32) + _params([(3,)], np.float64) + _params([(3,)], np.float64)
    buckets = fusion.plan_buckets(ps, 2**20)
    assert [b.dtype for b in buckets] == [np.float32, np.float64]
    assert [len(b.params) for b in buckets] == [1, 2]
    with pytest.raises(ValueError, match="fusion_bytes"):
        fusion.plan_buckets(ps, -1)


def test_pack_unpack_round_trip_and_missing_grads():
    rng = np.random.default_rng(0)
    ps = _params([(2, 3), (4,), (1, 1, 2)])
    ps[0].grad = rng.standard_normal((2, 3))
    ps[2].grad = rng.standard_normal((1, 1, 2))
    (bucket,) = fusion.plan_buckets(ps, 2**20)
    buf = fusion.pack(bucket)
    np.testing.assert_array_equal(buf[:6], ps[0].grad.ravel())
    np.testing.assert_array_equal(buf[6:10], 0)
    np.testing.assert_array_equal(buf[-3:], [1, 0, 1])  # presence flags
    g0 = ps[0].grad
    expected0, expected2 = ps[0].grad * 0.5, ps[2].grad * 0.5
    fusion.unpack(bucket, buf.copy(), scale=0.5)
    assert ps[0].grad is g0  # written in place
    np.testing.assert_array_equal(ps[0].grad, expected0)
    np.testing.assert_array_equal(ps[2].grad, expected2)
    assert ps[1].grad is None  # no rank had a gradient: stays None
    # another rank had a gradient for p1: after the sum its flag is 1, so it gets one here too
    reduced = buf.copy()
    reduced[6:10] = [1, 2, 3, 4]
    reduced[-2] = 1
    fusion.unpack(bucket, reduced)
    np.testing.assert_array_equal(ps[1].grad, [1, 2, 3, 4])


def test_pack_rejects_wrong_grad_shape():
    ps = _params([(2, 3)])
    ps[0].grad = np.zeros(6)
    (bucket,) = fusion.plan_buckets(ps, 2**20)
    with pytest.raises(ValueError, match=r"shape \(2, 3\) has a gradient of shape \(6,\)"):
        fusion.pack(bucket)


# ----------------------------------------------------------------------------- compression
def test_fp16_compression_halves_bytes_and_round_trips():
    x = np.linspace(-3, 3, 101, dtype=np.float32)
    wire16 = compression.compress(x, "fp16")
    assert wire16.dtype == np.float16 and wire16.nbytes == x.nbytes // 2
    back = compression.decompress(wire16, np.dtype(np.float32))
    assert back.dtype == np.float32
    np.testing.assert_allclose(back, x, rtol=1e-3, atol=1e-3)
    assert compression.compress(x, None) is x
    with pytest.raises(ValueError, match="compression must be one of"):
        compression.check("int8")


# ----------------------------------------------------------------------------- timing
def test_step_timings_breakdown():
    t = dist.StepTimings()
    t.restart()
    t.add("communication", 0.25)
    t.add("wait", 0.125)
    t.end_step()
    assert t.steps == 1 and t.last["communication"] == 0.25 and t.last["wait"] == 0.125
    assert t.last["compute"] >= 0.0
    t.add("communication", 0.75)
    t.end_step()
    assert t.mean()["communication"] == pytest.approx(0.5)
    assert "communication" in str(t) and "mean over 2 steps" in t.summary()


# ----------------------------------------------------------------------------- sampler
@pytest.mark.parametrize("size", [1, 2, 3, 4])
def test_sampler_union_is_the_single_process_batch(size):
    n, b = 50, 4
    single = list(dist.DistributedSampler(n, batch_size=size * b, seed=7, rank=0, size=1))
    per_rank = [list(dist.DistributedSampler(n, batch_size=b, seed=7, rank=r, size=size)) for r in range(size)]
    assert all(len(batches) == len(single) for batches in per_rank)
    for i, batch in enumerate(single):
        np.testing.assert_array_equal(np.concatenate([per_rank[r][i] for r in range(size)]), batch)


def test_sampler_epochs_differ_and_resume_mid_epoch():
    s = dist.DistributedSampler(40, batch_size=5, seed=3, rank=1, size=2)
    e0 = list(s)
    s.set_epoch(1)
    e1 = list(s)
    assert not np.array_equal(np.concatenate(e0), np.concatenate(e1))
    s.set_epoch(1)
    it = iter(s)
    next(it)
    saved = s.state_dict()
    t = dist.DistributedSampler(40, batch_size=5, seed=0, rank=1, size=2)
    t.load_state_dict(json.loads(json.dumps(saved)))
    np.testing.assert_array_equal(np.concatenate(list(t)), np.concatenate(e1[1:]))


def test_sampler_keeps_last_partial_batch_evenly():
    s = dist.DistributedSampler(11, batch_size=2, shuffle=False, drop_last=False, rank=0, size=2)
    assert len(s) == 3
    assert [len(b) for b in s] == [2, 2, 1]  # the last global batch of 3 is cut to 2, split evenly
    with pytest.raises(ValueError, match="no full global batch"):
        dist.DistributedSampler(3, batch_size=2, rank=0, size=2)
    with pytest.raises(ValueError, match="rank 2 is not in"):
        dist.DistributedSampler(30, batch_size=2, rank=2, size=2)


# ----------------------------------------------------------------------------- context
class _FakeComm:
    def __init__(self, rank, size):
        self.r, self.s = rank, size

    def Get_rank(self):
        return self.r

    def Get_size(self):
        return self.s

    Send = Recv = Sendrecv = Barrier = lambda self, *a, **k: None


def test_context_is_per_thread():
    seen = {}

    def worker(r):
        dist.init(_FakeComm(r, 4))
        seen[r] = (dist.rank(), dist.size())

    threads = [threading.Thread(target=worker, args=(r,)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert seen == {r: (r, 4) for r in range(4)}


def test_context_errors():
    def uninitialized():
        with pytest.raises(RuntimeError, match="not initialized"):
            dist.get_comm()

    dist.shutdown()
    t = threading.Thread(target=uninitialized)
    t.start()
    t.join()
    with pytest.raises(TypeError, match="not a communicator"):
        dist.init(object())
