"""Text data: Vocabulary, PTB-format and plain-text readers, batchify and BPTT windows."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidl.data import (
    Vocabulary,
    batchify,
    bptt_batches,
    num_bptt_batches,
    read_ptb,
    read_text_file,
    read_words,
)

# PTB's own format: a leading space, space-separated tokens, " \n" at each line end.
PTB_TRAIN = " the cat sat on the mat \n the dog <unk> \n a cat \n"
PTB_VALID = " the dog sat \n"
PTB_TEST = " a zebra sat \n"  # 'zebra' is not in train


def write_ptb(directory, train=PTB_TRAIN, valid=PTB_VALID, test=PTB_TEST):
    directory.mkdir(exist_ok=True)
    for name, text in (("train", train), ("valid", valid), ("test", test)):
        (directory / f"ptb.{name}.txt").write_text(text, encoding="utf-8")
    return directory


# ----------------------------------------------------------------------------- vocabulary
def test_vocabulary_order_and_round_trip():
    vocab = Vocabulary.from_tokens("b a c a b a d".split())
    assert vocab.words == ["a", "b", "c", "d"]  # a:3, b:2, then c, d (count 1) alphabetically
    ids = vocab.encode(["d", "a", "b"])
    assert ids.dtype == np.int64 and ids.tolist() == [3, 0, 1]
    assert vocab.decode(ids) == ["d", "a", "b"]
    assert len(vocab) == 4 and "c" in vocab and "z" not in vocab


def test_vocabulary_errors():
    with pytest.raises(ValueError, match="duplicate words"):
        Vocabulary(["a", "b", "a"])
    vocab = Vocabulary(["a", "b"])
    with pytest.raises(KeyError, match="'z' is not in the vocabulary"):
        vocab.index("z")
    with pytest.raises(ValueError, match=r"valid.txt: 2 out-of-vocabulary token\(s\) \(1 distinct\), e.g. \['z'\]"):
        vocab.encode(["a", "z", "z"], source="valid.txt")
    with pytest.raises(KeyError, match="'<unk>' is not in the vocabulary"):
        vocab.encode(["z"], unk="<unk>")


# ----------------------------------------------------------------------------- readers
def test_read_words_appends_eos_per_line(tmp_path):
    path = tmp_path / "f.txt"
    path.write_text(" a b \n\n c", encoding="utf-8")  # an empty line, and no final newline
    assert read_words(path) == ["a", "b", "<eos>", "<eos>", "c", "<eos>"]
    path.write_bytes("\ufeffé x\r\ny\x0cz\n".encode())  # BOM, CRLF, a form feed inside a line
    assert read_words(path) == ["é", "x", "<eos>", "y", "z", "<eos>"]
    path.write_bytes(b"")
    assert read_words(path) == []


def test_read_ptb(tmp_path):
    corpus = read_ptb(write_ptb(tmp_path / "ptb"))
    # train counts: the 3, cat 2, <eos> 3, then 1 each: <unk> a dog mat on sat (ASCII order: '<' < 'a')
    assert corpus.vocab.words == ["<eos>", "the", "cat", "<unk>", "a", "dog", "mat", "on", "sat"]
    assert corpus.vocab.decode(corpus.train) == "the cat sat on the mat <eos> the dog <unk> <eos> a cat <eos>".split()
    assert corpus.vocab.decode(corpus.valid) == ["the", "dog", "sat", "<eos>"]
    assert corpus.vocab.decode(corpus.test) == ["a", "<unk>", "sat", "<eos>"]  # OOV 'zebra' -> <unk>
    assert corpus.train.dtype == np.int64
    assert corpus.unigram_perplexity("valid") > 1


def test_read_ptb_oov_errors(tmp_path):
    with pytest.raises(ValueError, match=r"ptb.test.txt: 1 out-of-vocabulary.*'zebra'"):
        read_ptb(write_ptb(tmp_path / "a"), oov="error")
    no_unk = write_ptb(tmp_path / "b", train=" the cat \n")
    with pytest.raises(ValueError, match=r"ptb.valid.txt: .*'dog'.*no '<unk>'"):
        read_ptb(no_unk)
    with pytest.raises(ValueError, match="oov must be"):
        read_ptb(tmp_path / "a", oov="drop")


def test_read_ptb_file_errors(tmp_path):
    with pytest.raises(NotADirectoryError, match="PTB directory not found"):
        read_ptb(tmp_path / "missing")
    d = write_ptb(tmp_path / "p")
    (d / "ptb.test.txt").unlink()
    with pytest.raises(FileNotFoundError, match="missing ptb.test.txt"):
        read_ptb(d)
    (d / "ptb.test.txt").write_bytes(b" ok \n caf\xe9 \n")  # Latin-1, not UTF-8
    with pytest.raises(ValueError, match=r"ptb.test.txt: not valid UTF-8 \(byte 9, line 2"):
        read_ptb(d)
    write_ptb(d, train="")
    with pytest.raises(ValueError, match="empty training file"):
        read_ptb(d)


def test_read_text_file(tmp_path):
    path = tmp_path / "book.txt"
    lines = [f"w{i % 7} w{i % 3} rare{i}" for i in range(100)]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    corpus = read_text_file(path, fractions=(0.8, 0.1, 0.1))
    total = corpus.train.size + corpus.valid.size + corpus.test.size
    assert total == 400 and corpus.train.size == 320 and corpus.valid.size == 40
    assert "<unk>" in corpus.vocab and corpus.vocab.words[0] == "<eos>"
    # Words of valid/test unseen in train (every rareN there) became <unk>.
    unk = corpus.vocab.index("<unk>")
    assert (corpus.test == unk).sum() == 10
    # min_count folds rare training words into <unk> too.
    folded = read_text_file(path, min_count=2)
    assert not any(w.startswith("rare") for w in folded.vocab.words)
    assert (folded.train == folded.vocab.index("<unk>")).sum() == 80


def test_read_text_file_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="text file not found"):
        read_text_file(tmp_path / "nope.txt")
    path = tmp_path / "small.txt"
    path.write_text("a b\n", encoding="utf-8")
    with pytest.raises(ValueError, match="3 tokens are too few"):
        read_text_file(path)
    with pytest.raises(ValueError, match="fractions must be three positive numbers"):
        read_text_file(path, fractions=(0.5, 0.5, 0.0))
    with pytest.raises(ValueError, match="min_count"):
        read_text_file(path, min_count=0)


# ----------------------------------------------------------------------------- batchify and BPTT
def test_batchify_is_zaremba():
    ids = np.arange(23)
    data = batchify(ids, 4)  # 4 streams of 5, the last 3 ids dropped
    assert data.shape == (5, 4) and data.flags.c_contiguous
    for j in range(4):
        np.testing.assert_array_equal(data[:, j], ids[5 * j : 5 * j + 5])


@settings(max_examples=30)
@given(n=st.integers(1, 300), batch_size=st.integers(1, 6), world=st.integers(1, 5))
def test_batchify_rank_shares_concatenate_to_single_process(n, batch_size, world):
    ids = np.arange(n, dtype=np.int64) * 7 % 11
    if n < batch_size * world:
        with pytest.raises(ValueError, match="fewer than"):
            batchify(ids, batch_size, 0, world)
        return
    shares = [batchify(ids, batch_size, rank=r, world=world) for r in range(world)]
    np.testing.assert_array_equal(np.concatenate(shares, axis=1), batchify(ids, batch_size * world))
    assert all(s.shape == (n // (batch_size * world), batch_size) for s in shares)


def test_batchify_errors():
    with pytest.raises(ValueError, match="must be 1-D"):
        batchify(np.zeros((2, 3), dtype=np.int64), 2)
    with pytest.raises(TypeError, match="integers"):
        batchify(np.zeros(10), 2)
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        batchify(np.arange(10), 2, rank=2, world=2)
    with pytest.raises(ValueError, match="batch_size and world must be >= 1"):
        batchify(np.arange(10), 0)


@pytest.mark.parametrize("drop_last", [True, False])
def test_bptt_batches(drop_last):
    data = batchify(np.arange(3 * 24), 3)  # [24, 3]
    windows = list(bptt_batches(data, 5, drop_last=drop_last))
    assert len(windows) == num_bptt_batches(24, 5, drop_last) == (4 if drop_last else 5)  # 23 usable steps
    for x, y in windows:
        assert x.shape == y.shape and x.shape[1] == 3
        np.testing.assert_array_equal(y, x + 1)  # targets: the next word of each stream
        assert not x.flags.writeable
    xs = np.concatenate([x for x, _ in windows])
    np.testing.assert_array_equal(xs, data[: xs.shape[0]])  # consecutive in time: state carries over
    assert xs.shape[0] == (20 if drop_last else 23)
    assert [x.shape[0] for x, _ in windows][-1] == (5 if drop_last else 3)


def test_bptt_batches_errors():
    with pytest.raises(ValueError, match=r"must be \[T, B\]"):
        next(bptt_batches(np.arange(10), 3))
    with pytest.raises(ValueError, match="num_steps must be >= 1"):
        next(bptt_batches(np.zeros((10, 2), dtype=np.int64), 0))
