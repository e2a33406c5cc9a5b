"""Files at their edges (issue 27): IDX gzip bombs refused before inflating, 255 dimensions named with the file,
an .npz checkpoint with an entry twice or a header that breaks NumPy's parser refused as a CheckpointError."""

import gzip
import io
import struct
import zipfile

import numpy as np
import pytest

import minidl
from minidl.data import IDXError, load_idx
from minidl.data.idx import MAX_DIMS


def test_idx_bomb_within_deflates_ratio_is_refused_before_inflating(tmp_path, monkeypatch):
    path = tmp_path / "bomb-idx3-ubyte.gz"
    body = bytes(20_000_000)  # 20 MB of zeros: a 20 kB gzip, which deflate's ratio allows
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", len(body)) + body))
    reads = []
    real_open = gzip.open

    def counting_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        for name in ("read", "readinto"):
            real = getattr(f, name)
            setattr(f, name, lambda n=-1, real=real, name=name: reads.append(name) or real(n))
        return f

    monkeypatch.setattr(gzip, "open", counting_open)
    with pytest.raises(
        IDXError,
        match=r"bomb-idx3-ubyte.gz: dimensions \(20000000,\) declare 20000000 bytes .* "
        r"more than the limit of 1000000 \(pass max_bytes=",
    ):
        load_idx(path, max_bytes=1_000_000)
    assert reads == ["read", "read"]  # the 4 bytes of the header and the 4 of its dimension, nothing more
    assert load_idx(path).shape == (20_000_000,)  # within the default limit


def test_idx_with_255_dimensions_names_the_file(tmp_path):
    path = tmp_path / "deep-idx"
    path.write_bytes(bytes([0, 0, 8, 255]) + struct.pack(">255I", *([1] * 255)) + bytes(1))
    with pytest.raises(IDXError, match=f"deep-idx: 255 dimensions, more than NumPy's {MAX_DIMS}"):
        load_idx(path)


def _npy(a):
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def test_an_npz_with_an_entry_twice_is_refused(tmp_path):
    path = tmp_path / "twice.npz"
    minidl.save({"w": np.ones(3)}, path)
    with zipfile.ZipFile(path, "a") as z, pytest.warns(UserWarning, match="Duplicate name"):
        z.writestr("w.npy", _npy(np.zeros(3)))
    with pytest.raises(minidl.CheckpointError, match=r"twice.npz': entry 'w.npy' appears twice"):
        minidl.load(path)


def test_an_npy_header_that_breaks_numpys_parser_is_a_checkpoint_error(tmp_path):
    path = tmp_path / "bad.npz"
    minidl.save({"w": np.ones(1000)}, path)
    data = path.read_bytes()
    path.write_bytes(data[:100] + bytes(50) + data[150:])  # zeros over the first entry's header dict
    with pytest.raises(minidl.CheckpointError, match=r"bad.npz'.*malformed .npy header"):
        minidl.load(path)
