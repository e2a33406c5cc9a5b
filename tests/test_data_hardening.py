"""Data readers refuse bad files early, with the problem named (issues 11 and 14)."""

from __future__ import annotations

import gzip
import struct

import pytest

from minidl.data import IDXError, load_idx, read_ptb


def test_idx_impossible_dimensions_are_named_before_inflating(tmp_path):
    path = tmp_path / "images-idx3-ubyte.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 3]) + struct.pack(">III", 60000, 28000, 28000) + bytes(100)))
    with pytest.raises(IDXError, match=r"images-idx3-ubyte.gz: impossible dimensions \(60000, 28000, 28000\)"):
        load_idx(path)


def test_idx_header_is_checked_before_the_body_is_inflated(tmp_path, monkeypatch):
    path = tmp_path / "bomb.gz"
    path.write_bytes(gzip.compress(b"\x12\x34\x08\x01" + struct.pack(">I", 10) + bytes(50_000_000)))
    reads = []
    real_open = gzip.open

    def counting_open(*args, **kwargs):
        f = real_open(*args, **kwargs)
        real_read = f.read

        def read(n=-1):
            reads.append(n)
            return real_read(n)

        f.read = read
        return f

    monkeypatch.setattr(gzip, "open", counting_open)
    with pytest.raises(IDXError, match="bad magic number"):
        load_idx(path)
    assert reads == [4]  # only the first four bytes were inflated


def test_idx_trailing_data_is_found_not_inflated_to_the_end(tmp_path):
    path = tmp_path / "x.gz"
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 2) + bytes(2 + 3_000_000)))
    with pytest.raises(IDXError, match=r"has trailing bytes.*needs 2 data bytes, file has more than 1048578$"):
        load_idx(path)  # one chunk (1 MiB) past the data, not the 3 MB (or, from a bomb, gigabytes) after it
    path.write_bytes(gzip.compress(bytes([0, 0, 8, 1]) + struct.pack(">I", 2) + bytes(2 + 3)))
    with pytest.raises(IDXError, match="has trailing bytes.*needs 2 data bytes, file has 5$"):
        load_idx(path)


def write_ptb(d, train="a b c\n", valid="a b\n", test="c a\n"):
    d.mkdir(exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (d / f"ptb.{name}.txt").write_text(text)
    return d


@pytest.mark.parametrize("split, role", [("valid", "validation"), ("test", "test")])
def test_empty_validation_or_test_file_is_refused_at_start(tmp_path, split, role):
    d = write_ptb(tmp_path / "ptb", **{split: "\n\n"})
    with pytest.raises(ValueError, match=rf"ptb.{split}.txt: empty {role} file"):
        read_ptb(d)


def test_missing_ptb_directory_names_the_three_files_and_where_they_come_from(tmp_path):
    with pytest.raises(NotADirectoryError) as err:
        read_ptb(tmp_path / "nowhere")
    message = str(err.value)
    for expected in ("ptb.train.txt", "ptb.valid.txt", "ptb.test.txt", "Mikolov", "simple-examples"):
        assert expected in message
    d = write_ptb(tmp_path / "ptb")
    (d / "ptb.valid.txt").unlink()
    with pytest.raises(FileNotFoundError, match="missing ptb.valid.txt.*Mikolov"):
        read_ptb(d)
