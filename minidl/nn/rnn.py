"""Recurrent layers: LSTMCell (composed from autograd primitives) and LSTM (the fused BPTT kernel).

An LSTM step (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000), gates in
PyTorch's order i, f, g, o::

    [a^i, a^f, a^g, a^o] = x W_ih^T + b_ih + h W_hh^T + b_hh      [B, 4H]
    i = sigma(a^i)   f = sigma(a^f)   g = tanh(a^g)   o = sigma(a^o)
    c' = f * c + i * g
    h' = o * tanh(c')

``LSTMCell`` writes exactly this with Tensor operations, so autograd derives its backward: the
version to read. ``LSTM`` runs each layer over the whole sequence with ``ops.lstm.LSTMFunction``,
whose backward through time is derived by hand: the version to train with. Tests check that the
two agree to 1e-6 in float64, and both against PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from minidl.nn.dropout import dropout as dropout_fn
from minidl.nn.init import uniform_
from minidl.nn.module import Module, Parameter
from minidl.ops.lstm import LSTMFunction
from minidl.ops.shape import Stack
from minidl.tensor import Tensor, get_default_dtype, tensor


def _uniform(shape: tuple[int, ...], bound: float) -> Parameter:
    p = Parameter(np.empty(shape, get_default_dtype()))
    uniform_(p, -bound, bound)
    return p


def _check_state_pair(name: str, state, shape: tuple[int, ...]) -> tuple[Tensor, Tensor]:
    if not isinstance(state, tuple | list) or len(state) != 2:
        raise TypeError(f"{name}: the state must be a pair (h, c), got {type(state).__name__}")
    h, c = (s if isinstance(s, Tensor) else tensor(s) for s in state)
    for label, s in (("h", h), ("c", c)):
        if s.shape != shape:
            raise ValueError(f"{name}: initial {label} must have shape {shape}, got {s.shape}")
    return h, c


def lstm_cell(
    x: Tensor,
    h: Tensor,
    c: Tensor,
    weight_ih: Tensor,
    weight_hh: Tensor,
    bias_ih: Tensor | None = None,
    bias_hh: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """One LSTM step written with Tensor operations (autograd derives the backward): returns (h', c')."""
    H = h.shape[1]
    a = x @ weight_ih.T + h @ weight_hh.T  # [B, 4H] pre-activations, gates i, f, g, o
    if bias_ih is not None:
        a = a + bias_ih + bias_hh
    i = a[:, 0:H].sigmoid()
    f = a[:, H : 2 * H].sigmoid()
    g = a[:, 2 * H : 3 * H].tanh()
    o = a[:, 3 * H : 4 * H].sigmoid()
    c_next = f * c + i * g
    h_next = o * c_next.tanh()
    return h_next, c_next


class LSTMCell(Module):
    """One LSTM step: ``h', c' = cell(x, (h, c))`` with x [B, I] and h, c [B, H].

    Parameters (PyTorch's names and layouts): weight_ih [4H, I], weight_hh [4H, H], bias_ih [4H],
    bias_hh [4H], initialized uniform(-1/sqrt(H), 1/sqrt(H)) as PyTorch does. A missing state is zeros.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True):
        super().__init__()
        if input_size <= 0 or hidden_size <= 0:
            raise ValueError(
                f"LSTMCell: sizes must be positive, got input_size={input_size}, hidden_size={hidden_size}"
            )
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        k = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((4 * hidden_size, input_size), k)
        self.weight_hh = _uniform((4 * hidden_size, hidden_size), k)
        self.bias_ih = _uniform((4 * hidden_size,), k) if bias else None
        self.bias_hh = _uniform((4 * hidden_size,), k) if bias else None

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"LSTMCell: input must be [B, {self.input_size}], got shape {x.shape}")
        B, H = x.shape[0], self.hidden_size
        if state is None:
            zeros = np.zeros((B, H), x.dtype)
            h, c = tensor(zeros), tensor(zeros)
        else:
            h, c = _check_state_pair("LSTMCell", state, (B, H))
        return lstm_cell(x, h, c, self.weight_ih, self.weight_hh, self.bias_ih, self.bias_hh)

    def extra_repr(self) -> str:
        return f"{self.input_size}, {self.hidden_size}" + ("" if self.bias else ", bias=False")


class LSTM(Module):
    """A stack of LSTM layers over a whole sequence, each run by the fused, hand-derived BPTT kernel.

    ``out, (h_n, c_n) = lstm(x, (h_0, c_0))`` with x [T, B, I] (or [B, T, I] if ``batch_first``),
    out [T, B, H] (the last layer's h_1..h_T), and h_0, c_0, h_n, c_n each [L, B, H]. A missing
    initial state is zeros. Feeding h_n, c_n (detached) into the next call is truncated BPTT.

    Parameters per layer k, PyTorch's names and layouts: weight_ih_l{k} [4H, I_k] (I_0 = I, else H),
    weight_hh_l{k} [4H, H], bias_ih_l{k}, bias_hh_l{k} [4H]. ``dropout`` applies to the output of
    every layer but the last, in training mode (Zaremba et al. 2014: dropout on the non-recurrent
    connections only). Init: uniform(-1/sqrt(H), 1/sqrt(H)) as PyTorch, or ``init_uniform(a)``.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        dropout: float = 0.0,
        batch_first: bool = False,
    ):
        super().__init__()
        if input_size <= 0 or hidden_size <= 0 or num_layers <= 0:
            raise ValueError(
                f"LSTM: sizes must be positive, got input_size={input_size}, "
                f"hidden_size={hidden_size}, num_layers={num_layers}"
            )
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"LSTM: dropout must be in [0, 1), got {dropout}")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.dropout, self.batch_first = bias, float(dropout), batch_first
        k = 1.0 / math.sqrt(hidden_size)
        for layer in range(num_layers):
            fan_in = input_size if layer == 0 else hidden_size
            setattr(self, f"weight_ih_l{layer}", _uniform((4 * hidden_size, fan_in), k))
            setattr(self, f"weight_hh_l{layer}", _uniform((4 * hidden_size, hidden_size), k))
            if bias:
                setattr(self, f"bias_ih_l{layer}", _uniform((4 * hidden_size,), k))
                setattr(self, f"bias_hh_l{layer}", _uniform((4 * hidden_size,), k))

    def init_uniform(self, bound: float) -> None:
        """Re-initialize every parameter uniform(-bound, bound) (Zaremba et al.: 0.1, 0.05, 0.04)."""
        for p in self.parameters():
            uniform_(p, -bound, bound)

    def layer_parameters(self, layer: int) -> list[Parameter]:
        names = ["weight_ih", "weight_hh"] + (["bias_ih", "bias_hh"] if self.bias else [])
        return [getattr(self, f"{n}_l{layer}") for n in names]

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not isinstance(x, Tensor):
            x = tensor(x)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            layout = "[B, T, I]" if self.batch_first else "[T, B, I]"
            raise ValueError(f"LSTM: input must be {layout} with I={self.input_size}, got shape {x.shape}")
        if self.batch_first:
            x = x.transpose(1, 0, 2)
        L, B, H = self.num_layers, x.shape[1], self.hidden_size
        if state is None:
            zeros = tensor(np.zeros((B, H), x.dtype))
            h0s = c0s = [zeros] * L
        else:
            h0, c0 = _check_state_pair("LSTM", state, (L, B, H))
            h0s, c0s = [h0[k] for k in range(L)], [c0[k] for k in range(L)]
        hs, cs = [], []
        out = x
        for k in range(L):
            if k > 0 and self.dropout > 0 and self.training:
                out = dropout_fn(out, self.dropout, training=True)
            out, h, c = LSTMFunction.apply(out, h0s[k], c0s[k], *self.layer_parameters(k))
            hs.append(h)
            cs.append(c)
        if self.batch_first:
            out = out.transpose(1, 0, 2)
        return out, (Stack.apply(*hs), Stack.apply(*cs))

    def extra_repr(self) -> str:
        extra = f", num_layers={self.num_layers}" if self.num_layers != 1 else ""
        extra += ", bias=False" if not self.bias else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        extra += ", batch_first=True" if self.batch_first else ""
        return f"{self.input_size}, {self.hidden_size}{extra}"
