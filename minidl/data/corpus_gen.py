"""A generated text corpus with a known optimal perplexity: a topic-and-syntax hidden Markov model.

Real corpora (PTB) need a download and nobody knows how good the best model could be. This
corpus ships as code: words are drawn from an HMM we build here, so the true probability of every
test sentence is computable (forward algorithm, ``minidl/data/hmm.py``) and a trained model's
perplexity can be compared with the best possible one.

The language (everything is drawn from ``seed``):

- **Syntax**: ``n_syntax`` word classes in a sparse Markov chain. Class 0 is the sentence end and
  emits only ``<eos>``. Every other class goes to a few (``successors``) other classes with peaked
  (Dirichlet) probabilities, so sentences have learnable shape. Some classes are *function* classes
  (a small shared pool of frequent words), the rest are *content* classes.
- **Topic**: a slow hidden variable (one of ``n_topics``), kept for whole sentences and redrawn
  only after ``<eos>``, where it changes with probability ``topic_switch``. Content classes draw
  words from a topic-specific list, so the topic of the last sentences predicts the next content
  word: structure beyond any fixed n-gram window, which an LSTM can carry in its state.
- **Ambiguity**: function classes share words, and content lists of different topics share a
  fraction of their words, so the hidden state is not a function of the last word.
- **Zipf**: within each list, word ``r`` (by a random rank order) has probability proportional
  to ``1 / r ** zipf_exponent``.

The hidden state is the pair (topic, class), an HMM of ``n_topics * n_syntax`` states.
Each split (train/valid/test) is an independent stream started from the stationary distribution,
so its optimal perplexity is exactly ``hmm.perplexity(split)`` (conditioning on the split's own prefix).
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

import numpy as np

from minidl.data.hmm import HMM
from minidl.data.text import Corpus, Vocabulary

__all__ = ["CorpusConfig", "CONFIGS", "build_language", "generated_corpus"]

EOS = "<eos>"


@dataclass(frozen=True)
class CorpusConfig:
    """Parameters of the generated language and the sizes of its splits (in words, ``<eos>`` included)."""

    n_topics: int = 4
    n_syntax: int = 12  # word classes, class 0 = sentence end
    n_function: int = 4  # classes 1..n_function are function classes, the rest content classes
    successors: int = 3  # out-degree of each class in the syntax chain
    transition_concentration: float = 0.5  # Dirichlet alpha: small = peaked transitions
    end_prob: float = 0.1  # extra p(content class -> <eos>): sets the sentence length
    topic_switch: float = 0.1  # p(topic changes) after each <eos>
    function_pool: int = 40  # shared function words
    function_words_per_class: int = 12
    content_words_per_list: int = 30  # words of one (topic, content class) list
    content_shared: float = 0.2  # fraction of a list drawn from words shared by all topics of the class
    zipf_exponent: float = 1.1
    train_words: int = 300_000
    valid_words: int = 30_000
    test_words: int = 30_000


CONFIGS: dict[str, CorpusConfig] = {
    "default": CorpusConfig(),
    # Same language, small splits: for tests and tutorials' --quick mode.
    "quick": CorpusConfig(train_words=20_000, valid_words=3_000, test_words=3_000),
    "large": CorpusConfig(train_words=1_000_000, valid_words=80_000, test_words=80_000),
}


def _pseudo_words(count: int, syllables: int, rng: np.random.Generator) -> list[str]:
    """``count`` distinct pronounceable words of ``syllables`` consonant-vowel syllables."""
    consonants, vowels = "bdfgklmnprstvz", "aeiou"
    table = [c + v for c in consonants for v in vowels]
    total = len(table) ** syllables
    if count > total:
        raise ValueError(f"cannot make {count} distinct words of {syllables} syllables (at most {total})")
    words = []
    for code in rng.choice(total, size=count, replace=False).tolist():
        parts = []
        for _ in range(syllables):
            code, digit = divmod(code, len(table))
            parts.append(table[digit])
        words.append("".join(parts))
    return words


def _zipf_row(width: int, columns: np.ndarray, exponent: float, rng: np.random.Generator) -> np.ndarray:
    """A probability row of length ``width``, Zipfian over ``columns`` in a random rank order."""
    row = np.zeros(width)
    weights = 1.0 / np.arange(1, columns.size + 1) ** exponent
    row[rng.permutation(columns)] = weights / weights.sum()
    return row


def _syntax_chain(cfg: CorpusConfig, rng: np.random.Generator) -> np.ndarray:
    """Sparse class-to-class transition matrix [n_syntax, n_syntax].

    Every class c links to ``c + 1`` (mod n) and to ``successors - 1`` other random classes, never
    to itself; the ring makes the chain irreducible, the random links make it aperiodic in practice
    (checked by the caller through the stationary distribution). Content classes also end the
    sentence with probability ``end_prob``.
    """
    n = cfg.n_syntax
    T = np.zeros((n, n))
    for c in range(n):
        others = [d for d in range(n) if d not in (c, (c + 1) % n)]
        k = min(cfg.successors - 1, len(others))
        succ = np.concatenate([[(c + 1) % n], rng.choice(others, size=k, replace=False)]).astype(int)
        T[c, succ] = rng.dirichlet(np.full(succ.size, cfg.transition_concentration))
        # Dirichlet draws can be ~0; keep every link usable so the chain stays irreducible.
        T[c, succ] = np.maximum(T[c, succ], 0.02)
        T[c] /= T[c].sum()
    content = np.arange(1 + cfg.n_function, n)
    T[content] *= 1.0 - cfg.end_prob
    T[content, 0] += cfg.end_prob
    return T


def build_language(cfg: CorpusConfig, seed: int = 0) -> tuple[HMM, list[str]]:
    """Build the HMM and its word list (symbol id -> word; id 0 is ``<eos>``) from ``cfg`` and ``seed``."""
    if not 1 <= cfg.n_function < cfg.n_syntax - 1:
        raise ValueError(
            f"need 1 <= n_function < n_syntax - 1, got n_function={cfg.n_function}, n_syntax={cfg.n_syntax}"
        )
    if cfg.n_topics < 1 or not 0.0 <= cfg.topic_switch <= 1.0:
        raise ValueError(f"need n_topics >= 1 and 0 <= topic_switch <= 1, got {cfg.n_topics}, {cfg.topic_switch}")
    if cfg.function_words_per_class > cfg.function_pool:
        raise ValueError("function_words_per_class cannot exceed function_pool")
    rng = np.random.default_rng([seed, 0x5EED])
    Z, C = cfg.n_topics, cfg.n_syntax
    n_content = C - 1 - cfg.n_function

    # Symbol ids: <eos>, then the function pool, then per content class its shared words and
    # each topic's own words.
    n_shared = round(cfg.content_shared * cfg.content_words_per_list)
    n_own = cfg.content_words_per_list - n_shared
    n_content_words = n_content * (n_shared + Z * n_own)
    V = 1 + cfg.function_pool + n_content_words
    words = [EOS] + _pseudo_words(cfg.function_pool, 2, rng) + _pseudo_words(n_content_words, 3, rng)

    emission = np.zeros((Z * C, V))
    function_ids = np.arange(1, 1 + cfg.function_pool)
    class_rows = {}
    for c in range(1, 1 + cfg.n_function):
        cols = rng.choice(function_ids, size=cfg.function_words_per_class, replace=False)
        class_rows[c] = _zipf_row(V, cols, cfg.zipf_exponent, rng)
    next_id = 1 + cfg.function_pool
    for z in range(Z):
        emission[z * C + 0, 0] = 1.0  # class 0 says <eos>
        for c in range(1, 1 + cfg.n_function):
            emission[z * C + c] = class_rows[c]  # function words do not depend on the topic
    for c in range(1 + cfg.n_function, C):
        shared = np.arange(next_id, next_id + n_shared)
        next_id += n_shared
        for z in range(Z):
            own = np.arange(next_id, next_id + n_own)
            next_id += n_own
            emission[z * C + c] = _zipf_row(V, np.concatenate([shared, own]), cfg.zipf_exponent, rng)

    # Transitions on (topic, class): the class follows the syntax chain; the topic is kept,
    # except when leaving <eos> (class 0), where it switches with probability topic_switch.
    syntax = _syntax_chain(cfg, rng)
    topic = np.full((Z, Z), cfg.topic_switch / max(Z - 1, 1))
    np.fill_diagonal(topic, 1.0 - cfg.topic_switch if Z > 1 else 1.0)
    transition = np.kron(np.eye(Z), syntax)  # state index z * C + c
    for z in range(Z):
        transition[z * C + 0] = np.kron(topic[z], syntax[0])

    uniform = np.full(Z * C, 1.0 / (Z * C))
    hmm = HMM(uniform, transition, emission)
    pi = hmm.stationary_distribution()
    if not np.allclose(pi @ transition, pi, atol=1e-10) or pi.min() <= 0:
        raise RuntimeError("generated syntax chain is not irreducible; try another seed")
    return HMM(pi, transition, emission), words


def generated_corpus(config: str | CorpusConfig = "default", seed: int = 0, **overrides) -> Corpus:
    """The generated corpus: train/valid/test id arrays, its Vocabulary and its true model.

    ``config`` is a name from ``CONFIGS`` ("default", "quick", "large") or a ``CorpusConfig``;
    keyword ``overrides`` replace fields (``generated_corpus("quick", train_words=50_000)``).
    Deterministic given (config, seed). ``corpus.optimal_perplexity("test")`` is the perplexity of
    the true HMM on the test split; ``corpus.unigram_perplexity("test")`` the context-free baseline.
    """
    if isinstance(config, str):
        if config not in CONFIGS:
            raise ValueError(f"unknown corpus config {config!r}; choose from {sorted(CONFIGS)}")
        cfg = CONFIGS[config]
    elif isinstance(config, CorpusConfig):
        cfg = config
    else:
        raise TypeError(f"config must be a name or a CorpusConfig, got {type(config).__name__}")
    unknown = set(overrides) - {f.name for f in fields(CorpusConfig)}
    if unknown:
        raise TypeError(f"unknown CorpusConfig field(s): {sorted(unknown)}")
    cfg = replace(cfg, **overrides)

    hmm, words = build_language(cfg, seed)
    splits = {}
    for i, (name, size) in enumerate(
        [("train", cfg.train_words), ("valid", cfg.valid_words), ("test", cfg.test_words)]
    ):
        # Independent generator per split: changing one split's size leaves the others unchanged.
        _, splits[name] = hmm.sample(size, np.random.default_rng([seed, 1 + i]))
    label = config if isinstance(config, str) else "custom"
    return Corpus(
        Vocabulary(words),
        splits["train"],
        splits["valid"],
        splits["test"],
        name=f"generated-{label}-seed{seed}",
        model=hmm,
    )
