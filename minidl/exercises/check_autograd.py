"""Checkers of exercises 1 and 2: an op's backward (by gradcheck) and an LSTM cell's backward (by autograd).

Both oracles are minidl's own: ``minidl.gradcheck`` (central differences in float64) and the autograd
of ``nn.rnn.lstm_cell``, the LSTM step composed from Tensor operations.
"""

from __future__ import annotations

from types import ModuleType

import numpy as np

import minidl
from minidl.exercises.core import Broke, canonical, expect_close, first_failure
from minidl.gradcheck import GradcheckError, gradcheck
from minidl.nn.rnn import lstm_cell

# --------------------------------------------------------------------------- exercise 1: logsumexp
LSE_SHAPES = [(1,), (3,), (2, 3), (2, 1, 4)]


def _lse_cases(tier: str, seed: int) -> list[tuple[tuple[int, ...], float, int]]:
    """(shape, offset, seed) smallest first; the offsets +-1000 overflow a naive exp."""
    if tier == "check":
        cases = [(s, 0.0, k) for k, s in enumerate(LSE_SHAPES)]
        return cases + [((2, 3), 1000.0, 7), ((2, 3), -1000.0, 8)]
    rng = np.random.default_rng(seed)
    shapes = [tuple(int(d) for d in rng.integers(1, 6, rng.integers(1, 4))) for _ in range(8)]
    offsets = rng.choice([0.0, 0.0, 700.0, -800.0, 1e4], size=8)
    return sorted(((s, float(o), int(seed) + k) for k, (s, o) in enumerate(zip(shapes, offsets))), key=_size)


def _size(case: tuple) -> tuple[int, float]:
    return int(np.prod(case[0])), abs(case[1])


def _lse_reference(x: np.ndarray) -> np.ndarray:
    m = x.max(axis=-1, keepdims=True)
    return (m + np.log(np.exp(x - m).sum(axis=-1, keepdims=True)))[..., 0]


def _lse_one(module: ModuleType, case: tuple) -> None:
    shape, offset, k = case
    x = np.random.default_rng(k).standard_normal(shape) + offset
    with minidl.no_grad():
        y = module.logsumexp(minidl.tensor(x))
    if not isinstance(y, minidl.Tensor):
        raise Broke("forward", "", f"logsumexp must return a Tensor, got {type(y).__name__}")
    prop = "forward, stable (no overflow)" if offset else "forward"
    expect_close("y", y.data, _lse_reference(x), prop, atol=1e-12, rtol=1e-12)
    try:
        gradcheck(module.logsumexp, [x])
    except GradcheckError as e:
        raise Broke("backward (gradcheck)", "", str(e)) from None


def check_logsumexp(module: ModuleType, tier: str, seed: int) -> None:
    describe = lambda c: f"x of shape {c[0]}, values standard normal" + (f" + {c[1]:g}" if c[1] else "")
    first_failure(_lse_cases(tier, seed), lambda c: _lse_one(module, c), describe)


def digest_logsumexp(module: ModuleType, seed: int) -> str:
    rng = np.random.default_rng(seed)
    x = minidl.tensor(rng.standard_normal((3, 5)) * 3 + rng.choice([0.0, 900.0]), requires_grad=True)
    y = module.logsumexp(x)
    y.backward(rng.standard_normal(y.shape))
    return canonical(y.data, x.grad)


# --------------------------------------------------------------------------- exercise 2: LSTM cell backward
GRADIENTS = ("dx", "dh", "dc", "dw_ih", "dw_hh", "db_ih", "db_hh")
LSTM_SIZES = [(1, 1, 1), (1, 2, 1), (2, 1, 2), (2, 3, 2), (3, 4, 5)]  # (B, I, H)


def _lstm_cases(tier: str, seed: int) -> list[tuple[int, int, int, bool, int]]:
    """(B, I, H, with an incoming dc', seed), smallest first."""
    if tier == "check":
        return [(*s, dc, k) for k, s in enumerate(LSTM_SIZES) for dc in (False, True)]
    rng = np.random.default_rng(seed)
    sizes = sorted((int(b), int(i), int(h)) for b, i, h in rng.integers(1, 9, (6, 3)))
    return [(b, i, h, True, int(seed) + k) for k, (b, i, h) in enumerate(sizes)]


def _lstm_inputs(B: int, I: int, H: int, k: int) -> list[np.ndarray]:
    rng = np.random.default_rng(k)
    shapes = [(B, I), (B, H), (B, H), (4 * H, I), (4 * H, H), (4 * H,), (4 * H,)]
    return [rng.standard_normal(s) for s in shapes]


def _autograd_twin(inputs: list[np.ndarray], dh: np.ndarray, dc: np.ndarray) -> tuple[list, list]:
    """h', c' and every input's gradient, by minidl's autograd of nn.rnn.lstm_cell, in float64."""
    ts = [minidl.tensor(a, requires_grad=True) for a in inputs]
    h_next, c_next = lstm_cell(*ts)
    ((h_next * minidl.tensor(dh)).sum() + (c_next * minidl.tensor(dc)).sum()).backward()
    return [h_next.data, c_next.data], [t.grad for t in ts]


def _lstm_one(module: ModuleType, case: tuple) -> None:
    B, I, H, with_dc, k = case
    inputs = _lstm_inputs(B, I, H, k)
    rng = np.random.default_rng(k + 1000)
    dh, dc = rng.standard_normal((B, H)), rng.standard_normal((B, H)) * with_dc
    (h_want, c_want), grads_want = _autograd_twin(inputs, dh, dc)
    h_next, c_next, cache = module.lstm_cell_forward(*[a.copy() for a in inputs])
    expect_close("h'", h_next, h_want, "forward (the given lstm_cell_forward was changed)")
    expect_close("c'", c_next, c_want, "forward (the given lstm_cell_forward was changed)")
    got = module.lstm_cell_backward(dh.copy(), dc.copy(), cache)
    if not isinstance(got, tuple | list) or len(got) != len(GRADIENTS):
        raise Broke("returns", "", f"expected a tuple of 7 arrays {GRADIENTS}, got {type(got).__name__}")
    for name, g, want in zip(GRADIENTS, got, grads_want):
        expect_close(name, g, want, f"gradient {name} (against autograd)", atol=1e-10, rtol=1e-7)


def check_lstm(module: ModuleType, tier: str, seed: int) -> None:
    describe = lambda c: f"B={c[0]}, I={c[1]}, H={c[2]}, dc' {'random' if c[3] else '= 0'}"
    first_failure(_lstm_cases(tier, seed), lambda c: _lstm_one(module, c), describe)


def digest_lstm(module: ModuleType, seed: int) -> str:
    inputs = _lstm_inputs(3, 2, 4, seed)
    rng = np.random.default_rng(seed + 1)
    _, _, cache = module.lstm_cell_forward(*inputs)
    return canonical(*module.lstm_cell_backward(rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), cache))
