"""A discrete hidden Markov model: sampling, and exact likelihood by the forward algorithm.

An HMM has hidden states ``s_t`` in ``{0..S-1}`` and observed symbols ``w_t`` in ``{0..V-1}``::

    p(s_1) = start[s_1]
    p(s_t | s_{t-1}) = transition[s_{t-1}, s_t]
    p(w_t | s_t) = emission[s_t, w_t]

The probability of a symbol sequence sums over every hidden path, which the forward algorithm
does in O(N S^2) time: with ``alpha_t(s) = p(s_t = s | w_1..w_t)`` (the normalized forward
variable, "filtering" distribution),

    predicted_t  = alpha_{t-1} @ transition                  (p(s_t | w_<t); start for t = 1)
    c_t          = sum_s predicted_t(s) emission[s, w_t]     (= p(w_t | w_<t))
    alpha_t      = predicted_t * emission[:, w_t] / c_t

so ``log p(w_1..w_N) = sum_t log c_t``. Normalizing at every step is the "scaled" forward
algorithm (Rabiner 1989): nothing underflows however long the sequence, and the per-token
conditional probabilities ``c_t`` come out for free. The best possible language model for text
drawn from the HMM predicts exactly ``c_t``, so ``exp(-mean log c_t)`` is the optimal perplexity.
"""

from __future__ import annotations

from bisect import bisect_right
from dataclasses import dataclass

import numpy as np

__all__ = ["HMM"]


def _check_stochastic(name: str, p: np.ndarray, ndim: int) -> np.ndarray:
    p = np.asarray(p, dtype=np.float64)
    if p.ndim != ndim:
        raise ValueError(f"HMM: {name} must have {ndim} dimension(s), got shape {p.shape}")
    if p.size == 0:
        raise ValueError(f"HMM: {name} is empty (shape {p.shape})")
    if not np.all(np.isfinite(p)) or np.any(p < 0):
        raise ValueError(f"HMM: {name} must be finite and non-negative")
    sums = p.sum(axis=-1)
    if not np.allclose(sums, 1.0, atol=1e-8):
        bad = int(np.argmax(np.abs(sums - 1.0)))
        where = f"row {bad} " if ndim == 2 else ""
        raise ValueError(f"HMM: {name} {where}sums to {float(np.ravel(sums)[bad])!r}, expected 1")
    return p


@dataclass(frozen=True, eq=False)
class HMM:
    """A hidden Markov model with ``start`` [S], ``transition`` [S, S], ``emission`` [S, V].

    Rows of ``transition`` and ``emission`` and ``start`` itself are probability vectors.
    """

    start: np.ndarray
    transition: np.ndarray
    emission: np.ndarray

    def __post_init__(self) -> None:
        start = _check_stochastic("start", self.start, 1)
        transition = _check_stochastic("transition", self.transition, 2)
        emission = _check_stochastic("emission", self.emission, 2)
        S = start.shape[0]
        if transition.shape != (S, S):
            raise ValueError(f"HMM: transition must be [{S}, {S}] to match start [{S}], got {transition.shape}")
        if emission.shape[0] != S:
            raise ValueError(f"HMM: emission must have {S} rows (one per state), got shape {emission.shape}")
        object.__setattr__(self, "start", start)
        object.__setattr__(self, "transition", transition)
        object.__setattr__(self, "emission", emission)

    @property
    def num_states(self) -> int:
        return self.transition.shape[0]

    @property
    def num_symbols(self) -> int:
        return self.emission.shape[1]

    # ------------------------------------------------------------------ stationary behaviour
    def stationary_distribution(self) -> np.ndarray:
        """The distribution ``pi`` with ``pi @ transition = pi`` (unique for an irreducible chain).

        Solved as a linear system: ``(transition^T - I) pi = 0`` with the row of ones
        ``sum(pi) = 1`` appended, by least squares.
        """
        S = self.num_states
        system = np.vstack([self.transition.T - np.eye(S), np.ones((1, S))])
        rhs = np.zeros(S + 1)
        rhs[-1] = 1.0
        pi, *_ = np.linalg.lstsq(system, rhs, rcond=None)
        pi = np.clip(pi, 0.0, None)
        return pi / pi.sum()

    def symbol_marginal(self) -> np.ndarray:
        """``p(w) = sum_s pi(s) emission[s, w]`` under the stationary distribution: the best unigram model."""
        return self.stationary_distribution() @ self.emission

    # ------------------------------------------------------------------ sampling
    def sample(self, length: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """Draw ``length`` steps: returns (states [length] int64, symbols [length] int64).

        The hidden chain is inherently sequential; each step is one inverse-CDF lookup
        (``bisect`` on the cumulative row, restricted to the row's non-zero entries), a few
        hundred nanoseconds in plain Python. Emissions are then drawn for all steps at once,
        grouped by state: one vectorized ``searchsorted`` per state.
        """
        if length < 0:
            raise ValueError(f"HMM.sample: length must be >= 0, got {length}")
        states = np.empty(length, dtype=np.int64)
        if length == 0:
            return states, np.empty(0, dtype=np.int64)
        u = rng.random(length)
        # Sparse rows: successors[s] and their cumulative probabilities.
        successors, cumulative = [], []
        for row in self.transition:
            nz = np.flatnonzero(row)
            successors.append(nz.tolist())
            cumulative.append(np.cumsum(row[nz]).tolist())
        first_cdf = np.cumsum(self.start)
        s = min(int(np.searchsorted(first_cdf, u[0], side="right")), self.num_states - 1)
        path = [s]
        append = path.append
        for x in u[1:].tolist():
            succ, cum = successors[s], cumulative[s]
            s = succ[min(bisect_right(cum, x), len(succ) - 1)]
            append(s)
        states[:] = path
        return states, self.sample_emissions(states, rng)

    def sample_emissions(self, states: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Draw one symbol per entry of ``states`` from that state's emission row."""
        symbols = np.empty(states.shape[0], dtype=np.int64)
        u = rng.random(states.shape[0])
        order = np.argsort(states, kind="stable")
        bounds = np.concatenate([[0], np.cumsum(np.bincount(states, minlength=self.num_states))])
        cdf = np.cumsum(self.emission, axis=1)
        for s in range(self.num_states):
            idx = order[bounds[s] : bounds[s + 1]]
            if idx.size:
                symbols[idx] = np.minimum(np.searchsorted(cdf[s], u[idx], side="right"), self.num_symbols - 1)
        return symbols

    # ------------------------------------------------------------------ likelihood
    def _check_symbols(self, symbols: np.ndarray) -> np.ndarray:
        w = np.asarray(symbols)
        if w.ndim != 1:
            raise ValueError(f"HMM: symbols must be a 1-D sequence, got shape {w.shape}")
        if w.size and (w.dtype.kind not in "iu"):
            raise TypeError(f"HMM: symbols must be integers, got dtype {w.dtype}")
        if w.size and (w.min() < 0 or w.max() >= self.num_symbols):
            raise ValueError(f"HMM: symbols must lie in [0, {self.num_symbols}), got range [{w.min()}, {w.max()}]")
        return w.astype(np.int64, copy=False)

    def token_log_probs(self, symbols: np.ndarray) -> np.ndarray:
        """``log p(w_t | w_1..w_{t-1})`` for every t, by the scaled forward algorithm. Shape [N]."""
        w = self._check_symbols(symbols)
        n = w.shape[0]
        if n == 0:
            return np.zeros(0)
        emission_by_symbol = np.ascontiguousarray(self.emission.T)  # row w = emission[:, w]
        transition = self.transition
        alpha = self.start * emission_by_symbol[w[0]]
        scale = np.empty(n)
        predicted = np.empty_like(alpha)
        for t in range(n):
            if t:
                np.dot(alpha, transition, out=predicted)
                np.multiply(predicted, emission_by_symbol[w[t]], out=alpha)
            c = alpha.sum()
            if c <= 0.0:
                raise ValueError(f"HMM: symbol {w[t]} at position {t} has probability 0 under the model")
            alpha *= 1.0 / c
            scale[t] = c
        return np.log(scale)

    def log_likelihood(self, symbols: np.ndarray) -> float:
        """``log p(w_1..w_N)`` (natural log), summing over all hidden paths."""
        return float(self.token_log_probs(symbols).sum())

    def perplexity(self, symbols: np.ndarray) -> float:
        """``exp(-(1/N) log p(w_1..w_N))``: the perplexity of the true model, the best any model can do."""
        lp = self.token_log_probs(symbols)
        if lp.size == 0:
            raise ValueError("HMM.perplexity: empty sequence")
        return float(np.exp(-lp.mean()))
