"""Exercise 2: the backward of one LSTM step, derived by hand (tutorial 03, section 3).

``lstm_cell_forward`` is written for you (minidl/exercises/lstm_forward.py): it is
``minidl.nn.rnn.lstm_cell`` in NumPy and returns h', c' and the cache (x, h, c, w_ih, w_hh, i, f, g, o,
tanh(c')), gates in PyTorch's order i, f, g, o (x [B, I], h and c [B, H], w_ih [4H, I], w_hh [4H, H],
b_ih and b_hh [4H]):

    a = x w_ih^T + b_ih + h w_hh^T + b_hh                     [B, 4H], cut into a^i, a^f, a^g, a^o
    i = sigma(a^i)   f = sigma(a^f)   g = tanh(a^g)   o = sigma(a^o)
    c' = f * c + i * g
    h' = o * tanh(c')

Write ``lstm_cell_backward``: given dh' = dL/dh' and dc' = dL/dc' (the gradient that reaches c' from the
next step, added to what flows through h'), return every input's gradient. The chain rule, step by step:

    do  = dh' * tanh(c')                   da^o = do * o (1 - o)
    dc  = dc' + dh' * o * (1 - tanh(c')^2)   (the total gradient of c')
    di  = dc * g                           da^i = di * i (1 - i)
    df  = dc * c                           da^f = df * f (1 - f)
    dg  = dc * i                           da^g = dg * (1 - g^2)
    dc_prev = dc * f
    da = [da^i, da^f, da^g, da^o]          [B, 4H]
    dx = da w_ih      dh_prev = da w_hh    dw_ih = da^T x    dw_hh = da^T h    db_ih = db_hh = sum_rows(da)

The checker compares every gradient with what minidl's autograd derives for ``nn.rnn.lstm_cell`` in float64.
The fused kernel minidl trains with (minidl/nn/lstm_kernel.py) does the same for all T steps at once.

Check it:  python -m minidl.exercises check lstm_cell_backward
"""

from __future__ import annotations

import numpy as np

from minidl.exercises.lstm_forward import lstm_cell_forward  # noqa: F401  (given: read it)


def lstm_cell_backward(dh_next: np.ndarray, dc_next: np.ndarray, cache: tuple) -> tuple[np.ndarray, ...]:
    """dh_next, dc_next [B, H] and the forward's cache -> (dx, dh, dc, dw_ih, dw_hh, db_ih, db_hh),
    each of the shape of the matching forward input."""
    x, h, c, w_ih, w_hh, i, f, g, o, tanh_c = cache
    raise NotImplementedError("exercise: lstm_cell_backward")
