"""Exercise 2, reference solution: one LSTM step's backward, by hand (the math is in the skeleton)."""

from __future__ import annotations

import numpy as np

from minidl.exercises.lstm_forward import lstm_cell_forward  # noqa: F401  (given: read it)


def lstm_cell_backward(dh_next: np.ndarray, dc_next: np.ndarray, cache: tuple) -> tuple[np.ndarray, ...]:
    x, h, c, w_ih, w_hh, i, f, g, o, tanh_c = cache
    do = dh_next * tanh_c
    dc = dc_next + dh_next * o * (1 - tanh_c**2)
    da = np.concatenate(
        [dc * g * i * (1 - i), dc * c * f * (1 - f), dc * i * (1 - g**2), do * o * (1 - o)], axis=1
    )  # [B, 4H], gates i, f, g, o
    db = da.sum(axis=0)
    return da @ w_ih, da @ w_hh, dc * f, da.T @ x, da.T @ h, db, db.copy()
