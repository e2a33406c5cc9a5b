"""IDX (MNIST format) reader and writer: byte layout, round trips, gzip, and every error."""

import gzip
import struct

import numpy as np
import pytest

from minidl.data import IDXError, load_idx, load_mnist, save_idx


def test_reads_hand_built_big_endian_bytes(tmp_path):
    """The exact MNIST layout: 00 00 <code> <ndim>, big-endian uint32 dims, big-endian data."""
    path = tmp_path / "labels-idx1-ubyte"
    path.write_bytes(bytes([0, 0, 0x08, 1]) + struct.pack(">I", 3) + bytes([7, 0, 255]))
    a = load_idx(path)
    assert a.dtype == np.uint8 and a.tolist() == [7, 0, 255]
    path = tmp_path / "shorts"
    path.write_bytes(bytes([0, 0, 0x0B, 2]) + struct.pack(">II", 1, 2) + struct.pack(">hh", 258, -2))
    b = load_idx(path)
    assert b.dtype == np.int16 and b.dtype.isnative and b.tolist() == [[258, -2]]


@pytest.mark.parametrize("dtype", [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64])
@pytest.mark.parametrize("name", ["plain-idx3-ubyte", "packed-idx3-ubyte.gz"])
def test_round_trip(tmp_path, dtype, name, rng):
    a = (rng.standard_normal((4, 5, 3)) * 100).astype(dtype)
    save_idx(tmp_path / name, a)
    raw = (tmp_path / name).read_bytes()
    assert (raw[:2] == b"\x1f\x8b") == name.endswith(".gz")
    b = load_idx(tmp_path / name)
    assert b.dtype == a.dtype and b.shape == a.shape
    np.testing.assert_array_equal(a, b)
    b[0, 0, 0] = 1  # a writable copy


def test_gzip_detected_by_content_not_name(tmp_path):
    save_idx(tmp_path / "no-suffix", np.arange(6, dtype=np.int32).reshape(2, 3), compress=True)
    np.testing.assert_array_equal(load_idx(tmp_path / "no-suffix"), np.arange(6).reshape(2, 3))


def test_load_mnist(tmp_path, rng):
    images = rng.integers(0, 256, (5, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, 5, dtype=np.uint8)
    save_idx(tmp_path / "train-images-idx3-ubyte.gz", images)
    save_idx(tmp_path / "train-labels-idx1-ubyte", labels)  # mixed: one gzipped, one plain
    x, y = load_mnist(tmp_path, "train")
    np.testing.assert_array_equal(x, images)
    np.testing.assert_array_equal(y, labels)
    save_idx(tmp_path / "t10k-images-idx3-ubyte", images)
    save_idx(tmp_path / "t10k-labels-idx1-ubyte", labels[:4])
    with pytest.raises(IDXError, match="5 images but 4 labels"):
        load_mnist(tmp_path, "t10k")
    with pytest.raises(ValueError, match="kind must be 'train' or 't10k'"):
        load_mnist(tmp_path, "test")
    with pytest.raises(NotADirectoryError, match="MNIST directory not found"):
        load_mnist(tmp_path / "nope")
    (tmp_path / "t10k-labels-idx1-ubyte").unlink()
    with pytest.raises(FileNotFoundError, match="neither t10k-labels-idx1-ubyte nor t10k-labels-idx1-ubyte.gz"):
        load_mnist(tmp_path, "t10k")
    save_idx(tmp_path / "t10k-labels-idx1-ubyte", labels.astype(np.int32))
    with pytest.raises(IDXError, match="expected uint8 labels"):
        load_mnist(tmp_path, "t10k")


def header(code, *dims):
    return bytes([0, 0, code, len(dims)]) + struct.pack(f">{len(dims)}I", *dims)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\x00\x00", r"too short for an IDX header \(2 bytes"),
        (b"\x12\x34\x08\x01" + struct.pack(">I", 1) + b"\x00", "bad magic number: first two bytes are 1234"),
        (header(0x0A, 2) + b"\x00\x00", r"unknown dtype code 0x0A \(known: 0x08"),
        (header(0x08, 2, 3)[:9], r"truncated header: 2 dimensions need 12 bytes, file has 9"),
        (
            header(0x08, 2, 3) + bytes(5),
            r"size mismatch \(truncated\): shape \(2, 3\) of uint8 needs 6 data bytes, file has 5",
        ),
        (header(0x0C, 2) + bytes(12), r"size mismatch \(has trailing bytes\).*needs 8 data bytes, file has 12"),
    ],
)
def test_malformed_files(tmp_path, content, message):
    path = tmp_path / "bad-idx"
    path.write_bytes(content)
    with pytest.raises(IDXError, match=message) as err:
        load_idx(path)
    assert str(path) in str(err.value)  # the message names the file
    path.write_bytes(gzip.compress(content))  # the same errors through gzip
    with pytest.raises(IDXError, match=message):
        load_idx(path)


def test_corrupt_gzip_and_missing_file(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(header(0x08, 100) + bytes(100))[:-10])
    with pytest.raises(IDXError, match="x.gz: corrupt or truncated gzip data"):
        load_idx(path)
    with pytest.raises(FileNotFoundError, match="IDX file not found"):
        load_idx(tmp_path / "missing")


def test_save_idx_errors(tmp_path):
    with pytest.raises(TypeError, match="dtype int64 has no IDX code"):
        save_idx(tmp_path / "a", np.arange(3, dtype=np.int64))
    with pytest.raises(TypeError, match="dtype bool has no IDX code"):
        save_idx(tmp_path / "a", np.zeros(3, dtype=bool))
