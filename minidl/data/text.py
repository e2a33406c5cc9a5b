"""Word-level text data: Vocabulary, Corpus, readers for PTB-format and plain text, batchify, BPTT windows.

Conventions follow Zaremba et al.'s ``reader.py`` (the PTB LSTM language model):

- a file is read line by line, split on whitespace, and ``<eos>`` is appended at each line end;
- the vocabulary is built from the training split only, words sorted by frequency (descending),
  ties broken alphabetically, ids 0, 1, 2, ... in that order;
- ``batchify`` cuts the id stream into ``B`` contiguous streams and drops the remainder;
  ``bptt_batches`` walks them in windows of ``num_steps``, targets shifted by one word.

Layout is time-major, ``[T, B]``, the layout ``nn.LSTM`` takes.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from minidl.data.hmm import HMM

__all__ = [
    "EOS",
    "UNK",
    "Vocabulary",
    "Corpus",
    "read_words",
    "read_ptb",
    "read_text_file",
    "batchify",
    "bptt_batches",
    "num_bptt_batches",
]

EOS = "<eos>"
UNK = "<unk>"
PTB_FILES = {"train": "ptb.train.txt", "valid": "ptb.valid.txt", "test": "ptb.test.txt"}
PTB_HINT = (
    "expected ptb.train.txt, ptb.valid.txt and ptb.test.txt (the Penn Treebank as "
    "preprocessed by Mikolov: 10k words, <unk> for the rest); they are in simple-examples/data/ of "
    "simple-examples.tgz from Tomas Mikolov's RNNLM page (www.fit.vutbr.cz/~imikolov/rnnlm/)"
)


# ----------------------------------------------------------------------------- vocabulary
class Vocabulary:
    """A bijection between words and ids ``0..len-1``; ``words[i]`` is the word with id ``i``."""

    def __init__(self, words: Iterable[str]):
        self.words: list[str] = list(words)
        self.word_to_id: dict[str, int] = {w: i for i, w in enumerate(self.words)}
        if len(self.word_to_id) != len(self.words):
            dup = [w for w, n in Counter(self.words).items() if n > 1]
            raise ValueError(f"Vocabulary: duplicate words {dup[:5]}")

    @classmethod
    def from_counts(cls, counts: Mapping[str, int]) -> Vocabulary:
        """Zaremba's order: by count descending, then alphabetically."""
        return cls(w for w, _ in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    @classmethod
    def from_tokens(cls, tokens: Iterable[str]) -> Vocabulary:
        return cls.from_counts(Counter(tokens))

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.word_to_id

    def __repr__(self) -> str:
        head = ", ".join(self.words[:5])
        return f"Vocabulary({len(self)} words: {head}{', ...' if len(self) > 5 else ''})"

    def index(self, word: str) -> int:
        try:
            return self.word_to_id[word]
        except KeyError:
            raise KeyError(f"word {word!r} is not in the vocabulary ({len(self)} words)") from None

    def encode(self, tokens: Sequence[str], unk: str | None = None, source: str = "input") -> np.ndarray:
        """Ids of ``tokens`` (int64). Out-of-vocabulary words map to ``unk`` if given, else raise.

        ``source`` names where the tokens came from, for the error message.
        """
        table = self.word_to_id
        if unk is None:
            missing = [t for t in tokens if t not in table]
            if missing:
                uniq = list(dict.fromkeys(missing))
                raise ValueError(
                    f"{source}: {len(missing)} out-of-vocabulary token(s) ({len(uniq)} distinct), e.g. {uniq[:5]}; "
                    f"the vocabulary has no {UNK!r} to map them to"
                )
            return np.fromiter((table[t] for t in tokens), dtype=np.int64, count=len(tokens))
        unk_id = self.index(unk)
        return np.fromiter((table.get(t, unk_id) for t in tokens), dtype=np.int64, count=len(tokens))

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.words[int(i)] for i in ids]


# ----------------------------------------------------------------------------- corpus
@dataclass
class Corpus:
    """Three id streams (int64 arrays) over one vocabulary; ``model`` is the true HMM if generated."""

    vocab: Vocabulary
    train: np.ndarray
    valid: np.ndarray
    test: np.ndarray
    name: str = ""
    model: HMM | None = None

    def split(self, name: str) -> np.ndarray:
        if name not in ("train", "valid", "test"):
            raise ValueError(f"unknown split {name!r}; choose train, valid or test")
        return getattr(self, name)

    def optimal_perplexity(self, split: str = "test") -> float:
        """Perplexity of the true model on a split, ``exp(-(1/N) log p(w_1..w_N))``: the best achievable."""
        if self.model is None:
            raise ValueError(f"corpus {self.name!r} was read from files: its optimal perplexity is unknown")
        return self.model.perplexity(self.split(split))

    def unigram_perplexity(self, split: str = "test") -> float:
        """Perplexity of the unigram model fitted on train (add-one smoothing): the context-free baseline."""
        counts = np.bincount(self.train, minlength=len(self.vocab)) + 1.0
        log_p = np.log(counts / counts.sum())
        return float(np.exp(-log_p[self.split(split)].mean()))

    def __repr__(self) -> str:
        return (
            f"Corpus({self.name!r}: vocab {len(self.vocab)}, train {self.train.size}, "
            f"valid {self.valid.size}, test {self.test.size} words)"
        )


# ----------------------------------------------------------------------------- readers
def read_words(path: str | Path) -> list[str]:
    """Whitespace tokens of a UTF-8 file with ``<eos>`` after every line (a last line without a
    newline gets one too). Raises FileNotFoundError / ValueError naming the file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"text file not found: {path}")
    raw = path.read_bytes()
    try:
        text = raw.decode("utf-8-sig")  # a leading byte-order mark, if any, is not part of the first word
    except UnicodeDecodeError as e:
        line = raw[: e.start].count(b"\n") + 1
        raise ValueError(f"{path}: not valid UTF-8 (byte {e.start}, line {line}: {e.reason})") from None
    lines = text.split("\n")  # only "\n" ends a line, as in Zaremba's reader ("\r" is whitespace)
    if lines[-1] == "":
        lines.pop()  # the newline at the end of the file does not start another line
    tokens: list[str] = []
    for line in lines:
        tokens.extend(line.split())
        tokens.append(EOS)
    return tokens


def read_ptb(directory: str | Path, oov: str = "unk") -> Corpus:
    """Read ``ptb.train.txt``, ``ptb.valid.txt``, ``ptb.test.txt`` from ``directory``.

    The vocabulary comes from the training file (Zaremba's order). PTB has already replaced rare
    words by ``<unk>``, so its valid/test words are all in the training vocabulary. For other
    files in this format, ``oov`` says what to do with valid/test words not seen in training:
    ``"unk"`` maps them to ``<unk>`` when the training file contains ``<unk>`` (and raises
    otherwise); ``"error"`` always raises. (Zaremba's reader silently drops them; we do not.)
    """
    if oov not in ("unk", "error"):
        raise ValueError(f"oov must be 'unk' or 'error', got {oov!r}")
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"PTB directory not found: {directory}; {PTB_HINT}")
    missing = [f for f in PTB_FILES.values() if not (directory / f).is_file()]
    if missing:
        raise FileNotFoundError(f"{directory}: missing {', '.join(missing)}; {PTB_HINT}")
    tokens = {split: read_words(directory / f) for split, f in PTB_FILES.items()}
    for split, words in tokens.items():
        if all(w == EOS for w in words):  # nothing to train on, or nothing to score: refuse now, not at the end
            role = {"train": "training", "valid": "validation", "test": "test"}[split]
            raise ValueError(f"{directory / PTB_FILES[split]}: empty {role} file (no words)")
    vocab = Vocabulary.from_tokens(tokens["train"])
    unk = UNK if (oov == "unk" and UNK in vocab) else None
    ids = {s: vocab.encode(t, unk=unk, source=str(directory / PTB_FILES[s])) for s, t in tokens.items()}
    return Corpus(vocab, ids["train"], ids["valid"], ids["test"], name=str(directory))


def read_text_file(
    path: str | Path, fractions: tuple[float, float, float] = (0.8, 0.1, 0.1), min_count: int = 1
) -> Corpus:
    """A corpus from any UTF-8 text file, split by token position into train/valid/test.

    Tokens as in ``read_words``. The first ``fractions[0]`` of the tokens is train, the next
    ``fractions[1]`` valid, the rest test. Training words seen fewer than ``min_count`` times, and
    valid/test words never seen in training, become ``<unk>``; the vocabulary (Zaremba's order over
    the training tokens) always contains ``<unk>``.
    """
    f = np.asarray(fractions, dtype=np.float64)
    if f.shape != (3,) or np.any(f <= 0) or not np.isclose(f.sum(), 1.0):
        raise ValueError(f"fractions must be three positive numbers summing to 1, got {fractions}")
    if min_count < 1:
        raise ValueError(f"min_count must be >= 1, got {min_count}")
    tokens = read_words(path)
    n = len(tokens)
    cut1, cut2 = int(round(f[0] * n)), int(round((f[0] + f[1]) * n))
    if not 0 < cut1 < cut2 < n:
        raise ValueError(f"{path}: {n} tokens are too few to split into train/valid/test by {tuple(fractions)}")
    train = tokens[:cut1]
    counts = Counter(train)
    if min_count > 1:
        train = [t if counts[t] >= min_count else UNK for t in train]
        counts = Counter(train)
    counts.setdefault(UNK, 0)
    vocab = Vocabulary.from_counts(counts)
    enc = lambda toks: vocab.encode(toks, unk=UNK)
    return Corpus(vocab, enc(train), enc(tokens[cut1:cut2]), enc(tokens[cut2:]), name=str(path))


# ----------------------------------------------------------------------------- batching
def batchify(ids: np.ndarray, batch_size: int, rank: int = 0, world: int = 1) -> np.ndarray:
    """Cut a 1-D id stream into contiguous streams, time-major: returns ``[T, batch_size]``.

    Single process (Zaremba): ``B = batch_size`` streams of ``T = len(ids) // B`` words each;
    stream ``j`` is ``ids[j*T : (j+1)*T]`` and the last ``len(ids) % B`` words are dropped.

    Data parallel: the global batch has ``batch_size * world`` streams, cut exactly as the single
    process would cut them, and rank ``r`` keeps streams ``r*batch_size .. (r+1)*batch_size - 1``.
    Hence, for every rank count,
        ``np.concatenate([batchify(ids, B, r, P) for r in range(P)], axis=1) == batchify(ids, B * P)``,
    so P ranks with B streams each see exactly the data of one process with B*P streams.
    """
    ids = np.asarray(ids)
    if ids.ndim != 1:
        raise ValueError(f"batchify: ids must be 1-D, got shape {ids.shape}")
    if ids.dtype.kind not in "iu":
        raise TypeError(f"batchify: ids must be integers, got dtype {ids.dtype}")
    if batch_size < 1 or world < 1:
        raise ValueError(f"batchify: batch_size and world must be >= 1, got {batch_size}, {world}")
    if not 0 <= rank < world:
        raise ValueError(f"batchify: rank must be in [0, {world}), got {rank}")
    streams = batch_size * world
    T = ids.shape[0] // streams
    if T == 0:
        raise ValueError(f"batchify: {ids.shape[0]} ids are fewer than the {streams} streams requested")
    mine = ids[: T * streams].reshape(streams, T)[rank * batch_size : (rank + 1) * batch_size]
    return np.ascontiguousarray(mine.T)


def num_bptt_batches(num_time_steps: int, num_steps: int, drop_last: bool = True) -> int:
    """How many windows ``bptt_batches`` yields for ``[num_time_steps, B]`` data (Zaremba's epoch_size)."""
    usable = max(num_time_steps - 1, 0)  # the last word is only ever a target
    return usable // num_steps if drop_last else -(-usable // num_steps)


def bptt_batches(data: np.ndarray, num_steps: int, drop_last: bool = True) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Truncated-BPTT windows over batchified ``data`` [T, B]: yields ``(x, y)``, each ``[num_steps, B]``.

    Window i is ``x = data[i*n : (i+1)*n]``, ``y = data[i*n + 1 : (i+1)*n + 1]`` (the next word).
    Windows are consecutive in time, so a model carries its hidden state from one to the next.
    ``drop_last=True`` (Zaremba) skips a final short window; ``False`` yields it, shorter.
    x and y are read-only views into ``data``.
    """
    data = np.asarray(data)
    if data.ndim != 2:
        raise ValueError(f"bptt_batches: data must be [T, B] (from batchify), got shape {data.shape}")
    if num_steps < 1:
        raise ValueError(f"bptt_batches: num_steps must be >= 1, got {num_steps}")
    for i in range(num_bptt_batches(data.shape[0], num_steps, drop_last)):
        start = i * num_steps
        stop = min(start + num_steps, data.shape[0] - 1)
        x, y = data[start:stop], data[start + 1 : stop + 1]
        x.flags.writeable = False
        y.flags.writeable = False
        yield x, y
