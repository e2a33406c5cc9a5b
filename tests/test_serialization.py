"""minidl.save / minidl.load: round trips without pickle, clear errors, and bitwise-identical resume of training."""

import os
import zipfile

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import minidl
from minidl import optim
from minidl.nn import Parameter
from minidl.optim import lr_scheduler as sched


def assert_same(a, b):
    """Equal structure, types and values (arrays bitwise, with dtype)."""
    assert type(a) is type(b), (a, b)
    if isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert type(k) is type(next(kk for kk in b if kk == k))
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype and a.shape == b.shape
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and np.isnan(a):
        assert np.isnan(b)
    else:
        assert a == b


def test_round_trip_keeps_structure_and_types(tmp_path):
    obj = {
        "model": {"layers.0.weight": np.arange(6, dtype=np.float32).reshape(2, 3), "layers.0.bias": np.zeros(3)},
        "optimizer": {
            "state": {0: {"step": 3, "momentum_buffer": np.ones((2, 3))}, 2: {}},
            "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "nesterov": True, "params": [0, 1, 2]}],
        },
        "epoch": 7,
        "loss": float("nan"),
        "best": float("inf"),
        "tiny": 5e-324,
        "name": "zaremba small ✓",
        "none": None,
        "empty": {},
        "empty_list": [],
        "nested": [[1, 2.5], ("a", None)],
        "np_scalar": np.float32(1.5),
        "np_int": np.int16(-3),
        "bool_": np.bool_(True),
        "ints": np.array([1, 2], dtype=np.int64),
        "flags": np.array([True, False]),
        "text": np.array(["ab", "c"]),
        "zero_d": np.array(2.0),
        "big": 2**62,
        "neg": -(2**63),
    }
    path = tmp_path / "ckpt.npz"
    minidl.save(obj, path)
    assert_same(minidl.load(path), obj)
    assert os.listdir(tmp_path) == ["ckpt.npz"]  # no temporary file left behind


def test_entries_are_readable_with_plain_numpy(tmp_path):
    path = tmp_path / "c.npz"
    minidl.save({"model": {"fc.weight": np.ones(2)}, "opt": {"state": {0: {"step": 4}}}}, path)
    with np.load(path, allow_pickle=False) as f:
        assert set(f.files) == {"model/fc.weight", "opt/state/0/step", "__minidl_manifest__"}
        assert f["opt/state/0/step"].item() == 4


def test_tensors_parameters_and_module_state_dicts_are_saved_as_arrays(tmp_path):
    p = Parameter(np.ones((2, 2), np.float32))
    path = tmp_path / "t.npz"
    minidl.save({"p": p, "t": minidl.tensor([1.0, 2.0])}, path)
    out = minidl.load(path)
    assert isinstance(out["p"], np.ndarray) and out["p"].dtype == np.float32
    np.testing.assert_array_equal(out["t"], [1.0, 2.0])
    minidl.save(p, path)  # a bare leaf at the top level
    np.testing.assert_array_equal(minidl.load(path), p.data)


def test_module_state_dict_round_trip(tmp_path):
    class Tiny(minidl.nn.Module):
        def __init__(self, seed):
            super().__init__()
            rng = np.random.default_rng(seed)
            self.weight = Parameter(rng.standard_normal((3, 2)).astype(np.float32))
            self.bias = Parameter(np.zeros(3, np.float32))
            self.register_buffer("num_batches_tracked", np.array(5, dtype=np.int64))

    minidl.save({"model": Tiny(0).state_dict()}, tmp_path / "m.npz")
    fresh = Tiny(1)
    fresh.load_state_dict(minidl.load(tmp_path / "m.npz")["model"])
    for (k, a), (k2, b) in zip(fresh.state_dict().items(), Tiny(0).state_dict().items()):
        assert k == k2 and a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)


def test_writes_exactly_at_path_and_compress(tmp_path):
    path = tmp_path / "checkpoint.bin"
    minidl.save({"a": np.zeros(1000)}, path, compress=True)
    assert path.exists() and not (tmp_path / "checkpoint.bin.npz").exists()
    assert path.stat().st_size < 1000
    np.testing.assert_array_equal(minidl.load(str(path))["a"], np.zeros(1000))


@pytest.mark.parametrize(
    "obj, err, match",
    [
        ({"a/b": 1}, ValueError, "contains the character '/'"),
        ({"a\0b": 1}, ValueError, "contains the character"),  # zip entry names end at a NUL
        ({"s": "a\0"}, ValueError, "NUL"),  # NumPy str_ arrays drop trailing NULs
        ({0: 1, "0": 2}, ValueError, "collide"),
        ({"x": np.array([object()], dtype=object)}, TypeError, "object arrays"),
        ({"x": {1, 2}}, TypeError, "unsupported type set at x"),
        ({"x": {(1, 2): 3}}, TypeError, "keys must be str or int"),
        ({"x": 2**64}, ValueError, "int64"),
        ({"__minidl_manifest__": 1}, ValueError, "reserved"),
    ],
)
def test_save_rejects_what_it_cannot_write(tmp_path, obj, err, match):
    with pytest.raises(err, match=match):
        minidl.save(obj, tmp_path / "bad.npz")
    assert os.listdir(tmp_path) == []


def test_failed_save_keeps_the_old_checkpoint(tmp_path):
    path = tmp_path / "c.npz"
    minidl.save({"epoch": 1}, path)
    with pytest.raises(TypeError):
        minidl.save({"epoch": 2, "bad": object()}, path)
    assert minidl.load(path) == {"epoch": 1}


def test_load_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="no checkpoint"):
        minidl.load(tmp_path / "missing.npz")

    garbage = tmp_path / "garbage.npz"
    garbage.write_bytes(b"this is not a zip archive at all")
    with pytest.raises(minidl.CheckpointError, match="is not an .npz checkpoint"):  # not "pickled data"
        minidl.load(garbage)
    raw_pickle = tmp_path / "raw.pkl"
    raw_pickle.write_bytes(b"\x80\x04K\x01.")  # pickle.dumps(1): refused without being unpickled
    with pytest.raises(minidl.CheckpointError, match="is not an .npz checkpoint"):
        minidl.load(raw_pickle)

    good = tmp_path / "good.npz"
    minidl.save({"w": np.arange(10000.0)}, good)
    truncated = tmp_path / "truncated.npz"
    truncated.write_bytes(good.read_bytes()[:5000])
    with pytest.raises(minidl.CheckpointError, match="truncated or corrupt"):
        minidl.load(truncated)

    pickled = tmp_path / "pickled.npz"
    np.savez(pickled, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(minidl.CheckpointError, match="without pickle"):
        minidl.load(pickled)

    single = tmp_path / "single.npy"
    np.save(single, np.zeros(3))
    with pytest.raises(minidl.CheckpointError, match="single .npy"):
        minidl.load(single)

    bad_manifest = tmp_path / "bad_manifest.npz"
    np.savez(bad_manifest, __minidl_manifest__=np.frombuffer(b"{not json", np.uint8))
    with pytest.raises(minidl.CheckpointError, match="unreadable manifest"):
        minidl.load(bad_manifest)

    missing_entry = tmp_path / "missing_entry.npz"
    with zipfile.ZipFile(good) as src, zipfile.ZipFile(missing_entry, "w") as dst:
        dst.writestr("__minidl_manifest__.npy", src.read("__minidl_manifest__.npy"))
    with pytest.raises(minidl.CheckpointError, match="lacks the array 'w'"):
        minidl.load(missing_entry)


def test_plain_npz_loads_as_flat_dict(tmp_path):
    path = tmp_path / "plain.npz"
    np.savez(path, weight=np.ones(2), bias=np.zeros(1))
    out = minidl.load(path)
    assert set(out) == {"weight", "bias"}


leaves = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.text(max_size=5).filter(lambda s: "\0" not in s),
    st.builds(lambda xs: np.array(xs, dtype=np.float32), st.lists(st.floats(width=32))),
)
trees = st.recursive(
    leaves,
    lambda kids: st.one_of(
        st.lists(kids, max_size=3),
        st.tuples(kids, kids),
        st.dictionaries(
            st.one_of(st.text(max_size=4).filter(lambda s: "/" not in s and "\0" not in s), st.integers(0, 99)),
            kids,
            max_size=3,
        ),
    ),
    max_leaves=8,
)


@settings(max_examples=30)
@given(obj=trees)
def test_round_trip_property(tmp_path_factory, obj):
    keys = [str(k) for k in obj] if isinstance(obj, dict) else []
    if len(set(keys)) != len(keys):  # 1 and "1" in one dict: refused by design (tested above)
        return
    path = tmp_path_factory.mktemp("rt") / "c.npz"
    try:
        minidl.save(obj, path)
    except ValueError as e:
        assert "collide" in str(e)
        return
    assert_same(minidl.load(path), obj)


# ----------------------------------------------------------------------------- resuming training bitwise
def grad_fn(params, t):
    """A gradient that depends on the parameters and the step, like a real loss: d/dp of ||p - c_t||^2 / 2 + noise."""
    rng = np.random.default_rng(1000 + t)
    return [p.data - 1.0 + 0.1 * rng.standard_normal(p.shape).astype(p.dtype) for p in params]


def build(kind):
    rng = np.random.default_rng(0)
    params = [Parameter(rng.standard_normal(s).astype(np.float32)) for s in [(4, 3), (3,), (2, 2, 2)]]
    if kind == "sgd":
        opt = optim.SGD(params, lr=0.05, momentum=0.9, nesterov=True, weight_decay=1e-4)
    elif kind == "adam":
        opt = optim.Adam(params, lr=1e-2, amsgrad=True, weight_decay=1e-3)
    elif kind == "adamw":
        opt = optim.AdamW(params, lr=1e-2)
    else:
        opt = optim.LARS(optim.exclude_bias_and_norm(params), lr=0.5, weight_decay=1e-4)
    return params, opt, sched.warmup_cosine(opt, 2, 10)


def train(params, opt, scheduler, steps, start=0):
    for t in range(start, start + steps):
        for p, g in zip(params, grad_fn(params, t)):
            p.grad = g
        optim.clip_grad_norm(params, 1.0)
        opt.step()
        scheduler.step()


@pytest.mark.parametrize("kind", ["sgd", "adam", "adamw", "lars"])
def test_save_load_resume_is_bitwise_identical(tmp_path, kind):
    k = 4
    straight = build(kind)
    train(*straight, 2 * k)

    params, opt, scheduler = build(kind)
    train(params, opt, scheduler, k)
    path = tmp_path / "resume.npz"
    minidl.save(
        {
            "params": [p.data for p in params],
            "optimizer": opt.state_dict(),
            "scheduler": scheduler.state_dict(),
            "step": k,
        },
        path,
    )
    del params, opt, scheduler

    params, opt, scheduler = build(kind)
    ckpt = minidl.load(path)
    for p, saved in zip(params, ckpt["params"]):
        p.data[...] = saved
    opt.load_state_dict(ckpt["optimizer"])
    scheduler.load_state_dict(ckpt["scheduler"])
    train(params, opt, scheduler, k, start=ckpt["step"])

    for a, b in zip(params, straight[0]):
        assert a.data.dtype == np.float32
        np.testing.assert_array_equal(a.data, b.data)
    assert opt.param_groups[0]["lr"] == straight[1].param_groups[0]["lr"]
    for sa, sb in zip(opt.state.values(), straight[1].state.values()):
        assert_same(sa, sb)
