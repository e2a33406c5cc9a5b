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
``nn.LSTM`` and ``nn.LSTMLayer`` always run the fused kernel; ``LSTMCell`` always the composed ops.
tests/test_lstm.py checks that the two agree to 1e-6 in float64 (``test_fused_matches_composed_*``, any
shape by hypothesis), tests/test_lstm_torch.py both against PyTorch.
"""

from __future__ import annotations

import math

import numpy as np

from minidl.nn.dropout import dropout as dropout_fn
from minidl.nn.init import uniform_
from minidl.nn.lstm_kernel import LSTMFunction
from minidl.nn.module import Module, Parameter
from minidl.ops.shape import Concatenate, Stack
from minidl.tensor import Tensor, get_default_dtype, tensor


def _uniform(shape: tuple[int, ...], bound: float, dtype=None) -> Parameter:
    p = Parameter(np.empty(shape, dtype or get_default_dtype()))
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
    """One LSTM step: ``h', c' = cell(x, (h, c))`` with x [B, I] and h, c [B, H] (or unbatched x [I], h, c [H]).

    Parameters (PyTorch's names and layouts): weight_ih [4H, I], weight_hh [4H, H], bias_ih [4H],
    bias_hh [4H], initialized uniform(-1/sqrt(H), 1/sqrt(H)) as PyTorch does. A missing state is zeros.
    """

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, dtype=None):
        super().__init__()
        _check_options("LSTMCell", 0.0, input_size=input_size, hidden_size=hidden_size)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        k = 1.0 / math.sqrt(hidden_size)
        self.weight_ih = _uniform((4 * hidden_size, input_size), k, dtype)
        self.weight_hh = _uniform((4 * hidden_size, hidden_size), k, dtype)
        self.bias_ih = _uniform((4 * hidden_size,), k, dtype) if bias else None
        self.bias_hh = _uniform((4 * hidden_size,), k, dtype) if bias else None

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, Tensor]:
        x = x if isinstance(x, Tensor) else tensor(x)
        if x.ndim not in (1, 2) or x.shape[-1] != self.input_size:
            raise ValueError(
                f"LSTMCell: input must be [B, {self.input_size}] or [{self.input_size}], got shape {x.shape}"
            )
        if x.ndim == 1:  # unbatched: a batch of one
            state = None if state is None else tuple(_as_row(s) for s in state)
            h, c = self.forward(x.reshape(1, self.input_size), state)
            return h.reshape(self.hidden_size), c.reshape(self.hidden_size)
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

    ``out, (h_n, c_n) = layer(x, (h_0, c_0))`` with x [T, B, I], out [T, B, D*H], and h_0, c_0, h_n, c_n
    each [D, B, H], D = 2 if ``bidirectional`` else 1 (a missing state is zeros). The reverse direction
    runs the same fused kernel over the sequence flipped in time, and its outputs are flipped back, so
    out[t] = [forward h_t, reverse h_t] (Schuster & Paliwal, "Bidirectional recurrent neural networks",
    1997). Parameters carry the stack's names, PyTorch's: weight_ih_l{index} [4H, I], weight_hh_l{index}
    [4H, H], bias_ih_l{index}, bias_hh_l{index} [4H], then the same with suffix ``_reverse``, so a layer's
    state_dict is the slice of the whole LSTM's that belongs to it. ``dropout`` applies to the input in
    training mode (``nn.LSTM`` gives it to every layer but the first: dropout between layers).
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        bias: bool = True,
        index: int = 0,
        dropout: float = 0.0,
        bidirectional: bool = False,
        dtype=None,
    ):
        super().__init__()
        _check_options("LSTMLayer", dropout, input_size=input_size, hidden_size=hidden_size)
        if index < 0:
            raise ValueError(f"LSTMLayer: index must be >= 0, got {index}")
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        self.index, self.dropout, self.bidirectional = index, float(dropout), bidirectional
        self.num_directions = 2 if bidirectional else 1
        k = 1.0 / math.sqrt(hidden_size)
        kinds = ("weight_ih", "weight_hh") + (("bias_ih", "bias_hh") if bias else ())
        shapes = [(4 * hidden_size, input_size), (4 * hidden_size, hidden_size), (4 * hidden_size,), (4 * hidden_size,)]
        self.names = [[f"{n}_l{index}{suffix}" for n in kinds] for suffix in ("", "_reverse")[: self.num_directions]]
        for names in self.names:
            for name, shape in zip(names, shapes):
                setattr(self, name, _uniform(shape, k, dtype))

    def layer_parameters(self, direction: int = 0) -> list[Parameter]:
        """[weight_ih, weight_hh(, bias_ih, bias_hh)] of a direction (1: reverse): the fused kernel's arguments."""
        return [getattr(self, n) for n in self.names[direction]]

    def run(self, x: Tensor, h0s: list[Tensor], c0s: list[Tensor]) -> tuple[Tensor, list[Tensor], list[Tensor]]:
        """The layer on x [T, B, I] from one h0, c0 [B, H] per direction: out [T, B, D*H], h_T and c_T per direction."""
        if self.dropout > 0 and self.training:
            x = dropout_fn(x, self.dropout, training=True)
        out, h, c = LSTMFunction.apply(x, h0s[0], c0s[0], *self.layer_parameters(0))
        if not self.bidirectional:
            return out, [h], [c]
        back, h_r, c_r = LSTMFunction.apply(x[::-1], h0s[1], c0s[1], *self.layer_parameters(1))
        return Concatenate.apply(out, back[::-1], axis=2), [h, h_r], [c, c_r]

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not isinstance(x, Tensor):
            x = tensor(x)
        if x.ndim != 3 or x.shape[2] != self.input_size:
            raise ValueError(f"LSTMLayer: input must be [T, B, I] with I={self.input_size}, got shape {x.shape}")
        D, B, H = self.num_directions, x.shape[1], self.hidden_size
        if state is None:
            h0s = c0s = [tensor(np.zeros((B, H), x.dtype))] * D
        else:
            h0, c0 = _check_state_pair("LSTMLayer", state, (D, B, H))
            h0s, c0s = [h0[d] for d in range(D)], [c0[d] for d in range(D)]
        out, hs, cs = self.run(x, h0s, c0s)
        return out, (Stack.apply(*hs), Stack.apply(*cs))

    def extra_repr(self) -> str:
        extra = ", bias=False" if not self.bias else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        extra += ", bidirectional=True" if self.bidirectional else ""
        return f"{self.input_size}, {self.hidden_size}, index={self.index}{extra}"


class LSTM(Module):
    """A stack of LSTM layers over a whole sequence, each run by the fused, hand-derived BPTT kernel.

    ``out, (h_n, c_n) = lstm(x, (h_0, c_0))`` with x [T, B, I] (or [B, T, I] if ``batch_first``, or
    unbatched [T, I]), out [T, B, D*H] (the last layer's h_1..h_T, D = 2 if ``bidirectional``: forward
    and reverse side by side), and h_0, c_0, h_n, c_n each [L*D, B, H] (row k*D + d: layer k, direction
    d; [L*D, H] unbatched). A missing initial state is zeros. Feeding h_n, c_n (detached) into the next
    call is truncated BPTT.

    ``lstm.layers`` is the list of ``LSTMLayer`` modules; ``lstm`` registers their very Parameter objects
    under the same names, so its state_dict is PyTorch's: weight_ih_l{k} [4H, I_k] (I_0 = I, else D*H),
    weight_hh_l{k} [4H, H], bias_ih_l{k}, bias_hh_l{k} [4H], and the ``_reverse`` ones. ``dropout``
    applies to the output of every layer but the last, in training mode (Zaremba et al. 2014: dropout on
    the non-recurrent connections only). Init: uniform(-1/sqrt(H), 1/sqrt(H)) as PyTorch, or
    ``init_uniform(a)``. ``proj_size`` (LSTM with projections) is not supported.
    """

    def __init__(
        self,
        input_size: int,
        hidden_size: int,
        num_layers: int = 1,
        bias: bool = True,
        batch_first: bool = False,
        dropout: float = 0.0,
        bidirectional: bool = False,
        proj_size: int = 0,
        dtype=None,
    ):
        super().__init__()
        _check_options("LSTM", dropout, input_size=input_size, hidden_size=hidden_size, num_layers=num_layers)
        if proj_size:
            raise NotImplementedError(f"LSTM: not supported: proj_size={proj_size} (LSTM with projections)")
        self.input_size, self.hidden_size, self.num_layers = input_size, hidden_size, num_layers
        self.bias, self.dropout, self.batch_first = bias, float(dropout), batch_first
        self.bidirectional, self.num_directions = bidirectional, 2 if bidirectional else 1
        # A plain list, not registered as submodules: the parameters are registered here instead, under
        # the flat names PyTorch uses (a registered list would name them layers.0.weight_ih_l0).
        self.layers = [
            LSTMLayer(
                input_size if k == 0 else self.num_directions * hidden_size,
                hidden_size,
                bias,
                k,
                dropout if k > 0 else 0.0,
                bidirectional,
                dtype,
            )
            for k in range(num_layers)
        ]
        for layer in self.layers:
            for name, p in layer.named_parameters():
                setattr(self, name, p)

    def init_uniform(self, bound: float) -> None:
        """Re-initialize every parameter uniform(-bound, bound) (Zaremba et al.: 0.1, 0.05, 0.04)."""
        for p in self.parameters():
            uniform_(p, -bound, bound)

    def layer_parameters(self, layer: int, direction: int = 0) -> list[Parameter]:
        return self.layers[layer].layer_parameters(direction)

    def forward(self, x: Tensor, state: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        if not isinstance(x, Tensor):
            x = tensor(x)
        unbatched = x.ndim == 2
        if x.ndim not in (2, 3) or x.shape[-1] != self.input_size:
            layout = "[B, T, I]" if self.batch_first else "[T, B, I]"
            raise ValueError(
                f"LSTM: input must be {layout} or unbatched [T, I] with I={self.input_size}, got shape {x.shape}"
            )
        if unbatched:  # a batch of one; the state [L*D, H] likewise
            x = x.reshape(x.shape[0], 1, x.shape[1])
            state = None if state is None else tuple(_unbatched_state(s) for s in state)
        elif self.batch_first:
            x = x.transpose(1, 0, 2)
        out, (h, c) = self._run_layers(x, state)
        if unbatched:
            return out.reshape(out.shape[0], out.shape[2]), (
                h.reshape(h.shape[0], h.shape[2]),
                c.reshape(c.shape[0], c.shape[2]),
            )
        if self.batch_first:
            out = out.transpose(1, 0, 2)
        return out, (h, c)

    def _run_layers(self, x: Tensor, state) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """x [T, B, I] through every layer; states [L*D, B, H]."""
        LD, B, H = self.num_layers * self.num_directions, x.shape[1], self.hidden_size
        if state is None:
            zeros = tensor(np.zeros((B, H), x.dtype))
            h0s = c0s = [zeros] * LD
        else:
            h0, c0 = _check_state_pair("LSTM", state, (LD, B, H))
            h0s, c0s = [h0[k] for k in range(LD)], [c0[k] for k in range(LD)]
        hs, cs, D = [], [], self.num_directions
        out = x
        for k, layer in enumerate(self.layers):
            # The layers are not submodules, so train()/eval() do not reach them: pass mode and dropout on.
            layer.training, layer.dropout = self.training, self.dropout if k > 0 else 0.0
            out, h, c = layer.run(out, h0s[k * D : (k + 1) * D], c0s[k * D : (k + 1) * D])
            hs += h
            cs += c
        return out, (Stack.apply(*hs), Stack.apply(*cs))

    def extra_repr(self) -> str:
        extra = f", num_layers={self.num_layers}" if self.num_layers != 1 else ""
        extra += ", bias=False" if not self.bias else ""
        extra += ", batch_first=True" if self.batch_first else ""
        extra += f", dropout={self.dropout}" if self.dropout else ""
        extra += ", bidirectional=True" if self.bidirectional else ""
        return f"{self.input_size}, {self.hidden_size}{extra}"


def _as_row(s) -> Tensor:
    """An unbatched cell state [H] as [1, H] (its shape is checked with the batched one's)."""
    s = s if isinstance(s, Tensor) else tensor(s)
    return s.reshape(1, s.shape[0]) if s.ndim == 1 else s


def _unbatched_state(s) -> Tensor:
    """An unbatched initial state [L*D, H] as [L*D, 1, H] (its shape is checked with the batched one's)."""
    s = s if isinstance(s, Tensor) else tensor(s)
    return s.reshape(s.shape[0], 1, s.shape[1]) if s.ndim == 2 else s
