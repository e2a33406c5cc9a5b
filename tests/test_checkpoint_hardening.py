"""Checkpoints from elsewhere: sizes checked before allocating, one CheckpointError naming file and key,
load_state_dict all-or-nothing, dtypes refused unless cast, failed saves that clean up (issue 11)."""

from __future__ import annotations

import io
import json
import os
import struct
import zipfile
import zlib

import numpy as np
import pytest

import minidl
from minidl import nn, optim
from minidl.nn.module import StateDictError


def npy_bytes(arr):
    f = io.BytesIO()
    np.save(f, arr)
    return f.getvalue()


def test_a_huge_declared_shape_is_refused_before_allocating(tmp_path):
    raw = bytearray(npy_bytes(np.zeros(4)))
    header = raw[10 : raw.index(b"\n") + 1].decode("latin1")
    huge = header.replace("(4,)", "(1000000000000,)").ljust(len(header) - 1)[: len(header) - 1] + "\n"
    raw = raw[:10] + huge.encode("latin1") + raw[10 + len(header) :]
    path = tmp_path / "huge.npz"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("w.npy", bytes(raw))
    with pytest.raises(minidl.CheckpointError, match=r"huge.npz.*entry 'w.npy'.*needs 8000000000000 bytes"):
        minidl.load(path)


def test_a_zip_entry_declaring_more_than_the_file_is_refused(tmp_path):
    good = tmp_path / "good.npz"
    minidl.save({"w": np.arange(100.0)}, good)
    raw = bytearray(good.read_bytes())
    # the central directory's uncompressed size of the first entry: claim 2**31 bytes
    cd = raw.rindex(b"PK\x01\x02")
    first = raw.index(b"PK\x01\x02")
    for start in (first,):
        raw[start + 20 : start + 28] = struct.pack("<II", 2**31 - 1, 2**31 - 1)
    bad = tmp_path / "bad.npz"
    bad.write_bytes(bytes(raw))
    assert cd >= first
    with pytest.raises(minidl.CheckpointError, match=r"bad.npz.*entry .* declares 2147483647 bytes"):
        minidl.load(bad)


def test_a_zip_bomb_is_refused_beyond_the_limit(tmp_path):
    path = tmp_path / "bomb.npz"
    minidl.save({"w": np.zeros(2_000_000)}, path, compress=True)  # 16 MB of zeros in a few kB
    assert path.stat().st_size < 100_000
    with pytest.raises(minidl.CheckpointError, match=r"bomb.npz' would inflate to \d+ bytes, more than the limit"):
        minidl.load(path, max_decompressed=1 << 20)
    assert minidl.load(path)["w"].shape == (2_000_000,)  # under the default limit it loads


def test_a_deflated_entry_claiming_more_than_deflate_can_produce_is_refused(tmp_path):
    path = tmp_path / "liar.npz"
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as z:
        z.writestr("w.npy", npy_bytes(np.arange(10.0)))
    raw = bytearray(path.read_bytes())
    cd = raw.index(b"PK\x01\x02")
    raw[cd + 24 : cd + 28] = struct.pack("<I", 3_000_000_000)  # uncompressed size in the central directory
    path.write_bytes(bytes(raw))
    with pytest.raises(minidl.CheckpointError, match="more than deflate can produce"):
        minidl.load(path)


def test_corrupt_compressed_data_is_one_checkpoint_error(tmp_path):
    path = tmp_path / "c.npz"
    minidl.save({"w": np.random.default_rng(0).standard_normal(1000)}, path, compress=True)
    raw = bytearray(path.read_bytes())
    raw[200:220] = bytes(20)
    path.write_bytes(bytes(raw))
    with pytest.raises(minidl.CheckpointError, match="c.npz"):
        minidl.load(path)


@pytest.mark.parametrize(
    "tree, key",
    [
        ({"type": "dict", "items": [["model", "str", {"type": "dict", "items": "x"}]]}, "model"),
        (
            {
                "type": "dict",
                "items": [["opt", "str", {"type": "dict", "items": [["state", "int", {"type": "none"}]]}]],
            },
            "opt",
        ),
        ({"type": "dict", "items": [["a", "str", {"type": "float", "entry": 3}]]}, "a"),
        ({"type": "dict", "items": [["a", "str", {"type": "pickle", "entry": "a"}]]}, "a"),
    ],
)
def test_malformed_manifests_name_the_key(tmp_path, tree, key):
    path = tmp_path / "m.npz"
    manifest = json.dumps({"format": "minidl.checkpoint", "version": 1, "tree": tree}).encode()
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__minidl_manifest__.npy", npy_bytes(np.frombuffer(manifest, np.uint8)))
    with pytest.raises(minidl.CheckpointError, match=rf"m.npz.*key '{key}"):
        minidl.load(path)


def test_a_deeply_nested_manifest_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "deep.npz"
    manifest = b'{"format":"minidl.checkpoint","version":1,"tree":' + b'{"type":"list","items":[' * 5000
    manifest += b"]}" * 5000 + b"}"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("__minidl_manifest__.npy", npy_bytes(np.frombuffer(manifest, np.uint8)))
    with pytest.raises(minidl.CheckpointError, match="deep.npz"):
        minidl.load(path)


def test_crc_mismatch_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "crc.npz"
    minidl.save({"w": np.arange(100.0)}, path)
    raw = bytearray(path.read_bytes())
    i = raw.index(np.arange(100.0).tobytes()[:16])
    raw[i + 8] ^= 0xFF
    path.write_bytes(bytes(raw))
    with pytest.raises(minidl.CheckpointError, match="crc.npz.*(CRC|corrupt)"):
        minidl.load(path)
    assert zlib  # (zlib errors are mapped too)


# ----------------------------------------------------------------------------- load_state_dict
def test_load_state_dict_writes_nothing_when_any_entry_is_wrong():
    model = nn.Sequential(nn.Linear(3, 4), nn.Linear(4, 2))
    before = {k: v.copy() for k, v in model.state_dict().items()}
    bad = {k: np.ones_like(v) for k, v in before.items()}
    bad["1.weight"] = np.ones((3, 3), bad["1.weight"].dtype)  # the last entry does not fit
    with pytest.raises(StateDictError, match="shape mismatch for 1.weight"):
        model.load_state_dict(bad)
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v, before[k])  # the first entries were not overwritten


def test_load_state_dict_refuses_another_dtype_unless_asked_to_cast():
    model = nn.Linear(3, 2)
    state = {k: v.astype(np.float16) for k, v in model.state_dict().items()}
    with pytest.raises(
        StateDictError, match=r"dtype mismatch for weight: checkpoint float16, model float\d+.*cast=True"
    ):
        model.load_state_dict(state)
    model.load_state_dict(state, cast=True)
    assert model.weight.dtype == minidl.get_default_dtype()


def test_optimizer_state_of_another_dtype_is_refused_unless_cast():
    p = nn.Parameter(np.zeros(3, np.float32))
    opt = optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = np.ones(3, np.float32)
    opt.step()
    sd = opt.state_dict()
    sd["state"][0]["momentum_buffer"] = sd["state"][0]["momentum_buffer"].astype(np.float64)
    with pytest.raises(ValueError, match="float64.*float32.*cast=True"):
        optim.SGD([p], lr=0.1, momentum=0.9).load_state_dict(sd)
    fresh = optim.SGD([p], lr=0.1, momentum=0.9)
    fresh.load_state_dict(sd, cast=True)
    assert fresh.state[p]["momentum_buffer"].dtype == np.float32


def test_adam_state_does_not_load_into_sgd():
    p = nn.Parameter(np.zeros(3))
    adam = optim.Adam([p], lr=0.001)
    p.grad = np.ones(3)
    adam.step()
    sgd = optim.SGD([p], lr=0.1)
    with pytest.raises(ValueError, match="saved by another optimizer"):
        sgd.load_state_dict(adam.state_dict())
    assert sgd.param_groups[0]["lr"] == 0.1


# ----------------------------------------------------------------------------- failed saves
def test_a_save_into_a_missing_directory_names_the_path(tmp_path):
    target = tmp_path / "no" / "such" / "dir" / "ckpt.npz"
    with pytest.raises(FileNotFoundError, match=r"save: cannot write '.*no/such/dir/ckpt.npz'"):
        minidl.save({"a": 1}, target)


def test_a_save_that_fails_midway_removes_its_temporary_file_and_names_the_path(tmp_path, monkeypatch):
    def full_disk(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    target = tmp_path / "ckpt.npz"
    with pytest.raises(OSError, match=r"save: cannot write '.*ckpt.npz': No space left on device"):
        minidl.save({"a": np.zeros(10)}, target)
    assert os.listdir(tmp_path) == []
