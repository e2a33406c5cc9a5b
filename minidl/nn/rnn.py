"""Recurrent layers: LSTMCell (composed from autograd primitives), LSTMLayer and LSTM (the fused BPTT kernel).

An LSTM step (Hochreiter & Schmidhuber 1997, with the forget gate of Gers et al. 2000), gates in
PyTorch's order i, f, g, o::

    [a^i, a^f, a^g, a^o] = x W_ih^T + b_ih + h W_hh^T + b_hh      [B, 4H]
    i = sigma(a^i)   f = sigma(a^f)   g = tanh(a^g)   o = sigma(a^o)
    c' = f * c + i * g
    h' = o * tanh(c')

``LSTMCell`` writes exactly this with Tensor operations, so autograd derives its backward: the
version to read. ``LSTM`` is a list of ``LSTMLayer`` modules, each running the whole sequence with
``nn.lstm_kernel.LSTMFunction``, whose backward through time is derived by hand: the version to train
with. A model can be cut between layers (layer-wise and pipeline parallelism hold a few layers each).
Tests check that the fused and composed versions agree to 1e-6 in float64, and both against PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from minidl.nn.dropout import dropout as dropout_fn
from minidl.nn.init import uniform_
from minidl.nn.lstm_kernel import LSTMFunction
from minidl.nn.module import Module, Parameter
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


def _check_options(name: str, dropout: float, **sizes: int) -> None:
    """Every size positive and dropout in [0, 1), or a one-line error naming them."""
    if any(v <= 0 for v in sizes.values()):
        raise ValueError(f"{name}: sizes must be positive, got " + ", ".join(f"{k}={v}" for k, v in sizes.items()))
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"{name}: dropout must be in [0, 1), got {dropout}")


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


class LSTMLayer(Module):
    """Layer ``index`` of an LSTM stack: a one-layer ``nn.LSTM`` that may drop out its input.

    ``out, (h_n, c_n) = layer(x, (h_0, c_0))`` with x [T, B, I], out [T, B, H], and h_0, c_0, h_n, c_n
    each [1, B, H] (a missing state is zeros). Its parameters carry the stack's names, PyTorch's:
    weight_ih_l{index} [4H, I], weight_hh_l{index} [4H, H], bias_ih_l{index}, bias_hh_l{index} [4H],
    so a layer's state_dict is the slice of the whole LSTM's that belongs to it. ``dropout`` applies to
    the input in training mode (``nn.LSTM`` gives it to every layer but the first: dropout between layers).
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, index: int = 0, dropout: float = 0.0):
        super().__init__()
        _check_options("LSTMLayer", dropout, input_size=input_size, hidden_size=hidden_size)
        if index < 0:
            raise ValueError(f"LSTMLayer: index must be >= 0, got {index}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.index, self.dropout = index, float(dropout)
        k = 1.0 / math.sqrt(hidden_size)
        self.names = [f"{n}_l{index}" for n in ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ())]
        shapes = [(4 * hidden_size, input_size), (4 * hidden_size, hidden_size), (4 * hidden_size,), (4 * hidden_size,)]
        for name, shape in zip(self.names, shapes):
            setattr(self, name, _uniform(shape, k))

    def layer_parameters(self) -> list[Parameter]:
        """[weight_ih, weight_hh(, bias_ih, bias_hh)]: the fused kernel's argument order."""
        return [getattr(self, n) for n in self.names]

    def run(self, x: Tensor, h0: Tensor, c0: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """The layer on x [T, B, I] from h0, c0 [B, H]: returns out [T, B, H], h_T, c_T [B, H]."""
        if self.dropout > 0 and self.training:
            x = dropout_fn(x, self.dropout, training=True)
        return LSTMFunction.apply(x, h0, c0, *self.layer_parameters())

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not isinstance(x, Tensor):
            x = tensor(x)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"LSTMLayer: input must be [T, B, I] with I={self.input_size}, got shape {x.shape}")
        B, H = x.shape[1], self.hidden_size
        if state is None:
            h0 = c0 = tensor(np.zeros((B, H), x.dtype))
        else:
            h0, c0 = (s[0] for s in _check_state_pair("LSTMLayer", state, (1, B, H)))
        out, h, c = self.run(x, h0, c0)
        return out, (Stack.apply(h), Stack.apply(c))

    def extra_repr(self) -> str:
        extra = ", bias=False" if not self.bias else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        return f"{self.input_size}, {self.hidden_size}, index={self.index}{extra}"


class LSTM(Module):
    """A stack of LSTM layers over a whole sequence, each run by the fused, hand-derived BPTT kernel.

    ``out, (h_n, c_n) = lstm(x, (h_0, c_0))`` with x [T, B, I] (or [B, T, I] if ``batch_first``),
    out [T, B, H] (the last layer's h_1..h_T), and h_0, c_0, h_n, c_n each [L, B, H]. A missing
    initial state is zeros. Feeding h_n, c_n (detached) into the next call is truncated BPTT.

    ``lstm.layers`` is the list of ``LSTMLayer`` modules; ``lstm`` registers their very Parameter objects
    under the same names, so its state_dict is PyTorch's: weight_ih_l{k} [4H, I_k] (I_0 = I, else H),
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
        _check_options("LSTM", dropout, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.dropout, self.batch_first = bias, float(dropout), batch_first
        # A plain list, not registered as submodules: the parameters are registered here instead, under
        # the flat names PyTorch uses (a registered list would name them layers.0.weight_ih_l0).
        self.layers = [
            LSTMLayer(input_size if k == 0 else hidden_size, hidden_size, bias, k, dropout if k > 0 else 0.0)
            for k in range(num_layers)
        ]
        for layer in self.layers:
            for name, p in layer.named_parameters():
                setattr(self, name, p)

    def init_uniform(self, bound: float) -> None:
        """Re-initialize every parameter uniform(-bound, bound) (Zaremba et al.: 0.1, 0.05, 0.04)."""
        for p in self.parameters():
            uniform_(p, -bound, bound)

    def layer_parameters(self, layer: int) -> list[Parameter]:
        return self.layers[layer].layer_parameters()

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
        for k, layer in enumerate(self.layers):
            # The layers are not submodules, so train()/eval() do not reach them: pass mode and dropout on.
            layer.training, layer.dropout = self.training, self.dropout if k > 0 else 0.0
            out, h, c = layer.run(out, h0s[k], c0s[k])
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
