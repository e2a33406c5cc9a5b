"""Speed of the generated data sets and of the exact-perplexity computation, one thread.

    python benchmarks/data.py            # 1M-word corpus, 10k images
    python benchmarks/data.py --quick    # small sizes (CI smoke run)

Prints, for the default corpus language: HMM sampling (words/s), the forward algorithm
(words/s: the cost of ``Corpus.optimal_perplexity``), the corpus's optimal, bigram and unigram
test perplexities; for the image set: images/s for 1 and 3 channels. Best of ``--rounds``.
"""

from __future__ import annotations

import argparse
import os

for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(var, "1")

import numpy as np  # noqa: E402

from minidl.data import generated_corpus, make_shapes  # noqa: E402
from minidl.data.corpus_gen import CONFIGS, build_language  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402
from minidl.tools.measure import peak_rss_mb, seconds, spread  # noqa: E402


def median_time(fn, rounds: int) -> float:
    """Median seconds of ``rounds`` calls (each result printed with its min-max below)."""
    values = [seconds(fn)() for _ in range(rounds)]
    med, lo, hi = spread(values)
    TIMINGS.append((med, lo, hi))
    return med


TIMINGS: list[tuple[float, float, float]] = []


def bigram_perplexity(train: np.ndarray, test: np.ndarray, vocab_size: int, k: float = 0.01) -> float:
    """Add-k smoothed bigram fitted on train: what a fixed one-word context can reach."""
    counts = np.zeros((vocab_size, vocab_size))
    np.add.at(counts, (train[:-1], train[1:]), 1)
    p = (counts + k) / (counts + k).sum(axis=1, keepdims=True)
    return float(np.exp(-np.log(p[test[:-1], test[1:]]).mean()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print_header(quick=args.quick)
    words, images = (50_000, 1_000) if args.quick else (1_000_000, 10_000)

    hmm, _ = build_language(CONFIGS["default"], seed=0)
    t_build = median_time(lambda: build_language(CONFIGS["default"], seed=0), args.rounds)
    sample = hmm.sample(words, np.random.default_rng(0))[1]
    t_sample = median_time(lambda: hmm.sample(words, np.random.default_rng(0)), args.rounds)
    n_fwd = min(words, 200_000)
    t_fwd = median_time(lambda: hmm.token_log_probs(sample[:n_fwd]), args.rounds)
    print(f"language: {hmm.num_states} hidden states, {hmm.num_symbols} words, built in {t_build * 1e3:.0f} ms")
    print(f"HMM sampling:      {words:>9,} words in {t_sample:.3f} s  ({words / t_sample:,.0f} words/s)")
    print(f"forward algorithm: {n_fwd:>9,} words in {t_fwd:.3f} s  ({n_fwd / t_fwd:,.0f} words/s)")

    corpus = generated_corpus("quick" if args.quick else "default")
    print(f"{corpus}")
    print(
        f"  test perplexity: optimal {corpus.optimal_perplexity('test'):.2f} | "
        f"bigram {bigram_perplexity(corpus.train, corpus.test, len(corpus.vocab)):.2f} | "
        f"unigram {corpus.unigram_perplexity('test'):.2f}"
    )

    for channels in (1, 3):
        t = median_time(lambda c=channels: make_shapes(images, channels=c), args.rounds)
        print(f"images {channels}x32x32:    {images:>9,} images in {t:.3f} s  ({images / t:,.0f} images/s)")
    worst = max((hi - lo) / med for med, lo, hi in TIMINGS)
    print(f"medians of {args.rounds} runs each, spread up to {100 * worst:.0f}%; peak memory {peak_rss_mb():.0f} MB")


if __name__ == "__main__":
    main()
