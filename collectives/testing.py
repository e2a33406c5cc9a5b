"""Test data for collectives, the same on every rank that asks: used by the tests and the benchmark."""

from __future__ import annotations

import numpy as np

SUPPORTED_KINDS = {"sum": "iufc", "prod": "iufc", "max": "biuf", "min": "biuf"}  # op -> dtype kinds (common.reduction)


def rank_data(seed: int, rank: int, shape: tuple, dtype, op: str = "sum") -> np.ndarray:
    """Rank ``rank``'s array for example ``seed``: any process can make any rank's array.

    Integers span their whole range (wrap-around is exact in any order); floats lie in [-4, 4], or
    in [0.5, 1.5] for products, which then neither overflow nor underflow; complex numbers likewise
    in both parts; bools are random.
    """
    rng = np.random.default_rng([seed, rank])
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return rng.integers(0, 2, shape).astype(bool)
    if dtype.kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)
    lo, hi = (0.5, 1.5) if op == "prod" else (-4.0, 4.0)
    values = rng.uniform(lo, hi, shape)
    if dtype.kind == "c":
        values = values + 1j * rng.uniform(lo, hi, shape)
    return values.astype(dtype)
