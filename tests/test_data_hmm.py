"""The HMM behind the generated corpus: forward algorithm vs brute force, sampler vs exact
probabilities, entropy rate; and the generated corpus itself (determinism, perplexities)."""

import itertools

import numpy as np
import pytest

from minidl.data import HMM, CorpusConfig, generated_corpus, read_text_file


def random_hmm(rng, S=3, V=4, sparsity=0.0):
    A = rng.random((S, S)) + 0.05
    A[rng.random((S, S)) < sparsity] = 0.0
    np.fill_diagonal(A, A.diagonal() + 0.1)  # keep every row non-empty
    B = rng.random((S, V)) + 0.05
    pi = rng.random(S) + 0.05
    return HMM(pi / pi.sum(), A / A.sum(1, keepdims=True), B / B.sum(1, keepdims=True))


def brute_force_prob(hmm, w):
    """p(w) = sum over every hidden path of start * prod transition * prod emission."""
    total = 0.0
    for path in itertools.product(range(hmm.num_states), repeat=len(w)):
        p = hmm.start[path[0]] * hmm.emission[path[0], w[0]]
        for t in range(1, len(w)):
            p *= hmm.transition[path[t - 1], path[t]] * hmm.emission[path[t], w[t]]
        total += p
    return total


def sticky_hmm():
    """A stationary 3-state HMM with persistent states and ambiguous emissions: its entropy rate
    (~0.998 nats) is well below its one-symbol entropy (~1.050 nats), so context matters."""
    A = np.array([[0.8, 0.15, 0.05], [0.05, 0.8, 0.15], [0.3, 0.0, 0.7]])
    B = np.array([[0.8, 0.1, 0.1], [0.1, 0.7, 0.2], [0.3, 0.3, 0.4]])
    pi = HMM(np.ones(3) / 3, A, B).stationary_distribution()
    return HMM(pi, A, B)


def entropy_of_sequences(hmm, n):
    """H(W_1..W_n) in nats by enumerating all V^n sequences (forward algorithm per sequence)."""
    lps = np.array([hmm.log_likelihood(np.array(w)) for w in itertools.product(range(hmm.num_symbols), repeat=n)])
    assert np.isclose(np.exp(lps).sum(), 1.0)
    return float(-(np.exp(lps) * lps).sum())


# ----------------------------------------------------------------------------- forward algorithm
def test_forward_matches_brute_force(rng):
    hmm = random_hmm(rng, S=3, V=4, sparsity=0.3)
    for n in (1, 2, 5):
        w = rng.integers(0, 4, n)
        assert hmm.log_likelihood(w) == pytest.approx(np.log(brute_force_prob(hmm, w)), rel=1e-12)


def test_token_log_probs_are_conditionals(rng):
    hmm = random_hmm(rng, S=4, V=3)
    w = rng.integers(0, 3, 6)
    lp = hmm.token_log_probs(w)
    for t in range(1, 6):  # log p(w_t | w_<t) = log p(w_1..w_t) - log p(w_1..w_{t-1})
        expect = np.log(brute_force_prob(hmm, w[: t + 1])) - np.log(brute_force_prob(hmm, w[:t]))
        assert lp[t] == pytest.approx(expect, rel=1e-10)
    assert lp.sum() == pytest.approx(hmm.log_likelihood(w))
    assert hmm.perplexity(w) == pytest.approx(np.exp(-lp.mean()))


def test_probabilities_of_all_sequences_sum_to_one(rng):
    hmm = random_hmm(rng, S=3, V=3)
    total = sum(np.exp(hmm.log_likelihood(np.array(w))) for w in itertools.product(range(3), repeat=5))
    assert total == pytest.approx(1.0, abs=1e-12)


def test_forward_does_not_underflow_on_long_sequences(rng):
    hmm = random_hmm(rng, S=5, V=50)
    _, w = hmm.sample(20_000, rng)
    ll = hmm.log_likelihood(w)
    assert np.isfinite(ll) and ll < -20_000  # p(w) ~ exp(-3 * 20000): far below float64's range


def test_stationary_distribution(rng):
    hmm = random_hmm(rng, S=6, V=2, sparsity=0.5)
    pi = hmm.stationary_distribution()
    np.testing.assert_allclose(pi @ hmm.transition, pi, atol=1e-12)
    assert pi.sum() == pytest.approx(1.0) and pi.min() >= 0
    np.testing.assert_allclose(hmm.symbol_marginal(), pi @ hmm.emission)


# ----------------------------------------------------------------------------- sampler and entropy rate
def test_sampler_pair_frequencies_match_model():
    """Empirical frequencies of consecutive symbol pairs vs the exact stationary pair probabilities."""
    hmm = sticky_hmm()
    pi = hmm.start
    _, w = hmm.sample(200_000, np.random.default_rng(1))
    # p(w1, w2) = sum_{s, s'} pi(s) B[s, w1] A[s, s'] B[s', w2]
    exact = (pi[:, None] * hmm.emission).T @ hmm.transition @ hmm.emission
    counts = np.zeros((3, 3))
    np.add.at(counts, (w[:-1], w[1:]), 1)
    freq = counts / counts.sum()
    # Binomial std is ~0.001 here; correlation inflates it a little.
    np.testing.assert_allclose(freq, exact, atol=0.004)
    # ... and differ from what independent symbols would give (the check has power).
    marginal = pi @ hmm.emission
    assert np.abs(exact - np.outer(marginal, marginal)).max() > 0.02


def test_observed_markov_chain_log_loss_equals_entropy_rate(rng):
    """With identity emissions the state is observed and the entropy rate is sum_i pi_i H(A_i)."""
    S = 4
    A = rng.dirichlet(np.ones(S), size=S)
    pi = HMM(np.full(S, 1 / S), A, np.eye(S)).stationary_distribution()
    hmm = HMM(pi, A, np.eye(S))
    rate = -(pi[:, None] * A * np.log(A)).sum()
    _, w = hmm.sample(100_000, np.random.default_rng(2))
    assert -hmm.token_log_probs(w).mean() == pytest.approx(rate, abs=0.01)


def test_hidden_chain_log_loss_within_entropy_rate_bounds():
    """For a hidden chain (Cover & Thomas, Thm 4.5.1):
    H(W_n | W_<n, S_1) <= entropy rate <= H(W_n | W_<n); the sample's mean log-loss must fall between.
    (By Shannon-McMillan-Breiman, -(1/N) log p(w_1..w_N) converges to the entropy rate.)"""
    S, n = 3, 7
    hmm = sticky_hmm()
    pi = hmm.start
    upper = entropy_of_sequences(hmm, n) - entropy_of_sequences(hmm, n - 1)
    lower = 0.0
    for s in range(S):
        given = HMM(np.eye(S)[s], hmm.transition, hmm.emission)
        lower += pi[s] * (entropy_of_sequences(given, n) - entropy_of_sequences(given, n - 1))
    assert lower <= upper < lower + 0.001  # tight bounds: 0.9970 <= rate <= 0.9978
    assert entropy_of_sequences(hmm, 1) > upper + 0.04  # far from the unigram entropy
    _, w = hmm.sample(200_000, np.random.default_rng(3))
    empirical = -hmm.token_log_probs(w).mean()
    assert lower - 0.004 <= empirical <= upper + 0.004


def test_sample_is_deterministic_and_well_formed():
    hmm = random_hmm(np.random.default_rng(0), S=4, V=6, sparsity=0.5)
    s1, w1 = hmm.sample(1000, np.random.default_rng(5))
    s2, w2 = hmm.sample(1000, np.random.default_rng(5))
    np.testing.assert_array_equal(w1, w2)
    np.testing.assert_array_equal(s1, s2)
    assert hmm.transition[s1[:-1], s1[1:]].min() > 0  # only allowed transitions
    assert hmm.emission[s1, w1].min() > 0  # only allowed emissions
    assert hmm.sample(0, np.random.default_rng(0))[1].shape == (0,)


def test_hmm_rejects_bad_parameters():
    A = np.array([[0.5, 0.5], [0.2, 0.8]])
    B = np.array([[1.0, 0.0], [0.5, 0.5]])
    with pytest.raises(ValueError, match="transition row 1 sums to"):
        HMM(np.array([0.5, 0.5]), np.array([[0.5, 0.5], [0.2, 0.7]]), B)
    with pytest.raises(ValueError, match="non-negative"):
        HMM(np.array([1.5, -0.5]), A, B)
    with pytest.raises(ValueError, match=r"transition must be \[3, 3\]"):
        HMM(np.ones(3) / 3, A, B)
    with pytest.raises(ValueError, match="emission must have 2 rows"):
        HMM(np.array([0.5, 0.5]), A, np.ones((3, 2)) / 2)
    hmm = HMM(np.array([0.5, 0.5]), A, B)
    with pytest.raises(ValueError, match=r"symbols must lie in \[0, 2\)"):
        hmm.log_likelihood(np.array([0, 2]))
    with pytest.raises(TypeError, match="integers"):
        hmm.log_likelihood(np.array([0.0, 1.0]))
    with pytest.raises(ValueError, match="probability 0"):
        HMM(np.array([1.0, 0.0]), np.eye(2), B).log_likelihood(np.array([1]))


# ----------------------------------------------------------------------------- the generated corpus
def test_generated_corpus_is_deterministic_and_well_formed():
    a = generated_corpus("quick", seed=0)
    b = generated_corpus("quick", seed=0)
    c = generated_corpus("quick", seed=1)
    for split in ("train", "valid", "test"):
        np.testing.assert_array_equal(a.split(split), b.split(split))
    assert a.vocab.words == b.vocab.words
    assert not np.array_equal(a.train, c.train)
    assert (a.train.size, a.valid.size, a.test.size) == (20_000, 3_000, 3_000)
    assert a.vocab.words[0] == "<eos>" and len(set(a.vocab.words)) == len(a.vocab)
    assert a.model.num_symbols == len(a.vocab)
    for ids in (a.train, a.valid, a.test):
        assert ids.dtype == np.int64 and ids.min() >= 0 and ids.max() < len(a.vocab)
    # Changing the train size leaves the other splits as they were.
    d = generated_corpus("quick", seed=0, train_words=5_000)
    np.testing.assert_array_equal(d.test, a.test)


def test_generated_corpus_perplexities():
    corpus = generated_corpus("quick", seed=0)
    opt_test, opt_valid = corpus.optimal_perplexity("test"), corpus.optimal_perplexity("valid")
    unigram = corpus.unigram_perplexity("test")
    # The default language: optimal in the 20s, far below unigram (a large learnable gap).
    assert 15 < opt_test < 40 and unigram > 3 * opt_test
    assert opt_valid == pytest.approx(opt_test, rel=0.1)
    # The optimal perplexity is the true model's: it matches a direct forward-algorithm evaluation.
    assert opt_test == pytest.approx(np.exp(-corpus.model.log_likelihood(corpus.test) / corpus.test.size))
    # The best unigram model (the stationary symbol marginal) is no better than the fitted one by much.
    marginal = corpus.model.symbol_marginal()
    assert np.exp(-np.log(marginal[corpus.test]).mean()) > 3 * opt_test


def test_generated_corpus_sentences_and_topics():
    corpus = generated_corpus("quick", seed=0)
    n_sentences = (corpus.train == 0).sum()
    assert 8 < corpus.train.size / n_sentences < 30  # PTB-like sentence lengths
    cfg = CorpusConfig(n_topics=1, train_words=2000, valid_words=500, test_words=500)
    assert generated_corpus(cfg).model.num_states == cfg.n_syntax


def test_generated_corpus_errors(tmp_path):
    with pytest.raises(ValueError, match="unknown corpus config 'nope'"):
        generated_corpus("nope")
    with pytest.raises(TypeError, match="unknown CorpusConfig field"):
        generated_corpus("quick", n_states=3)
    with pytest.raises(ValueError, match="n_function"):
        generated_corpus("quick", n_function=20)
    path = tmp_path / "t.txt"
    path.write_text("a b c\n" * 50)
    with pytest.raises(ValueError, match="optimal perplexity is unknown"):
        read_text_file(path).optimal_perplexity()
    with pytest.raises(ValueError, match="unknown split"):
        generated_corpus("quick").optimal_perplexity("dev")
