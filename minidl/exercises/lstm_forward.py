"""The forward of exercise 2, given: one LSTM step in NumPy, ``minidl.nn.rnn.lstm_cell`` without autograd.

Gates in PyTorch's order i, f, g, o; x [B, I], h and c [B, H], w_ih [4H, I], w_hh [4H, H], b_ih and b_hh [4H]::

    a = x w_ih^T + b_ih + h w_hh^T + b_hh                     [B, 4H], cut into a^i, a^f, a^g, a^o
    i = sigma(a^i)   f = sigma(a^f)   g = tanh(a^g)   o = sigma(a^o)
    c' = f * c + i * g
    h' = o * tanh(c')
"""

from __future__ import annotations

import numpy as np


def sigmoid(a: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-a))


def lstm_cell_forward(x, h, c, w_ih, w_hh, b_ih, b_hh) -> tuple[np.ndarray, np.ndarray, tuple]:
    """One LSTM step: h' [B, H], c' [B, H] and the cache (x, h, c, w_ih, w_hh, i, f, g, o, tanh(c'))."""
    H = h.shape[1]
    a = x @ w_ih.T + b_ih + h @ w_hh.T + b_hh
    i, f, g, o = sigmoid(a[:, :H]), sigmoid(a[:, H : 2 * H]), np.tanh(a[:, 2 * H : 3 * H]), sigmoid(a[:, 3 * H :])
    c_next = f * c + i * g
    tanh_c = np.tanh(c_next)
    h_next = o * tanh_c
    return h_next, c_next, (x, h, c, w_ih, w_hh, i, f, g, o, tanh_c)
