"""The word-level LSTM language model of Zaremba, Sutskever & Vinyals (2014), "Recurrent Neural Network
Regularization" (arXiv:1409.2329), and its small / medium / large configurations.

    tokens x [T, B] -> Embedding -> dropout -> LSTM (L layers, dropout between them) -> dropout
                    -> Linear decoder -> logits [T*B, V]

Dropout acts on the non-recurrent connections only (the paper's point): on the embeddings, between
LSTM layers and before the decoder, never on h_{t-1} -> h_t. Training is truncated BPTT: batches of
B parallel streams cut into windows of T steps; the final (h, c) of one window, detached, is the
initial state of the next (``detach_state``).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from minidl.nn.dropout import Dropout
from minidl.nn.embedding import Embedding
from minidl.nn.init import uniform_
from minidl.nn.linear import Linear
from minidl.nn.module import Module
from minidl.nn.rnn import LSTM
from minidl.tensor import Tensor, get_default_dtype, tensor

State = tuple[Tensor, Tensor]


@dataclass(frozen=True)
class LMConfig:
    """A training configuration in the paper's terms.

    lr is multiplied by ``lr_decay`` once per epoch after epoch ``decay_after``
    (epochs counted from 1: the first decayed epoch is ``decay_after + 1``); all parameters start
    uniform(-init_scale, init_scale); gradients are clipped to global norm ``max_grad_norm``.
    """

    hidden_size: int
    num_layers: int
    num_steps: int  # T, the BPTT window
    batch_size: int  # B, parallel streams
    dropout: float
    init_scale: float
    lr: float
    lr_decay: float
    decay_after: int
    epochs: int
    max_grad_norm: float
    vocab_size: int = 10_000

    def lr_at(self, epoch: int) -> float:
        """The learning rate of (1-based) ``epoch``: lr * lr_decay ** max(epoch - decay_after, 0)."""
        return self.lr * self.lr_decay ** max(epoch - self.decay_after, 0)

    def with_(self, **changes) -> LMConfig:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


# Zaremba et al. 2014, section 4.1 (and the reference code's SmallConfig / MediumConfig / LargeConfig).
PRESETS: dict[str, LMConfig] = {
    "small": LMConfig(
        hidden_size=200,
        num_layers=2,
        num_steps=20,
        batch_size=20,
        dropout=0.0,
        init_scale=0.1,
        lr=1.0,
        lr_decay=0.5,
        decay_after=4,
        epochs=13,
        max_grad_norm=5.0,
    ),
    "medium": LMConfig(
        hidden_size=650,
        num_layers=2,
        num_steps=35,
        batch_size=20,
        dropout=0.5,
        init_scale=0.05,
        lr=1.0,
        lr_decay=1 / 1.2,
        decay_after=6,
        epochs=39,
        max_grad_norm=5.0,
    ),
    "large": LMConfig(
        hidden_size=1500,
        num_layers=2,
        num_steps=35,
        batch_size=20,
        dropout=0.65,
        init_scale=0.04,
        lr=1.0,
        lr_decay=1 / 1.15,
        decay_after=14,
        epochs=55,
        max_grad_norm=10.0,
    ),
}


class LSTMLanguageModel(Module):
    """Embedding -> dropout -> LSTM -> dropout -> Linear; ``forward(x [T, B], state) -> (logits [T*B, V], state)``.

    Parameter names: ``embedding.weight`` [V, E], ``lstm.weight_ih_l0`` ... (PyTorch's nn.LSTM names),
    ``decoder.weight`` [V, H], ``decoder.bias`` [V]. ``init_scale`` (if given) re-initializes every
    parameter uniform(-init_scale, init_scale) as the paper does; otherwise each layer keeps its PyTorch
    default initialization. ``sparse_embedding``: ``Embedding(sparse=True)``, whose gradient data parallelism
    exchanges as its non-zero rows (``minidl.distributed.data_parallel.sparse_rows``); the same model otherwise.
    """

    def __init__(
        self,
        vocab_size: int,
        hidden_size: int,
        num_layers: int = 2,
        dropout: float = 0.0,
        embedding_size: int | None = None,
        init_scale: float | None = None,
        sparse_embedding: bool = False,
    ):
        super().__init__()
        if vocab_size <= 0:
            raise ValueError(f"LSTMLanguageModel: vocab_size must be positive, got {vocab_size}")
        embedding_size = hidden_size if embedding_size is None else embedding_size
        self.vocab_size, self.hidden_size, self.num_layers = vocab_size, hidden_size, num_layers
        self.embedding = Embedding(vocab_size, embedding_size, sparse=sparse_embedding)
        self.drop = Dropout(dropout)
        self.lstm = LSTM(embedding_size, hidden_size, num_layers, dropout=dropout)
        self.decoder = Linear(hidden_size, vocab_size)
        if init_scale is not None:
            self.init_uniform(init_scale)

    @classmethod
    def from_config(cls, config: LMConfig | str, vocab_size: int | None = None) -> LSTMLanguageModel:
        """The model of a preset name ("small", "medium", "large") or an LMConfig, for ``vocab_size`` words."""
        if isinstance(config, str):
            if config not in PRESETS:
                raise KeyError(f"unknown LM preset {config!r}; choose one of {sorted(PRESETS)}")
            config = PRESETS[config]
        return cls(
            vocab_size or config.vocab_size,
            config.hidden_size,
            config.num_layers,
            config.dropout,
            init_scale=config.init_scale,
        )

    def init_uniform(self, bound: float) -> None:
        """Every parameter uniform(-bound, bound) (Zaremba et al.: 0.1 small, 0.05 medium, 0.04 large)."""
        for p in self.parameters():
            uniform_(p, -bound, bound)

    def init_hidden(self, batch_size: int) -> State:
        """Zero (h, c), each [L, B, H], in the parameters' dtype."""
        dtype = self.decoder.weight.dtype
        shape = (self.num_layers, batch_size, self.hidden_size)
        return tensor(np.zeros(shape, dtype)), tensor(np.zeros(shape, dtype))

    @staticmethod
    def detach_state(state: State) -> State:
        """Cut the graph between BPTT windows: same values, no history (truncated backpropagation)."""
        return state[0].detach(), state[1].detach()

    def forward(self, x, state: State | None = None) -> tuple[Tensor, State]:
        tokens = x.data if isinstance(x, Tensor) else np.asarray(x)
        if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
            raise ValueError(
                f"LSTMLanguageModel: input must be integer token ids [T, B], got shape "
                f"{tokens.shape} and dtype {tokens.dtype}"
            )
        T, B = tokens.shape
        if state is None:
            state = self.init_hidden(B)
        emb = self.drop(self.embedding(tokens))  # [T, B, E]
        out, state = self.lstm(emb, state)  # [T, B, H]
        out = self.drop(out).reshape(T * B, self.hidden_size)
        return self.decoder(out), state

    def units(self) -> list[tuple[str, Module]]:
        """The model as a chain of (name, unit): [embedding, LSTM layer 0, ..., LSTM layer L-1, decoder].

        Running the units in order is ``forward`` (the same dropout masks, drawn in the same order), with
        the LSTM state kept inside each ``Recurrent`` unit instead of passed around. Model, pipeline and
        tensor parallelism cut this list; each unit's parameter names are the model's (name "" adds none).
        """
        if "_units" not in self.__dict__:  # built once: whoever cuts the model (a stage, ZeRO's hooks) holds the same
            layers = [("", Recurrent(layer)) for layer in self.lstm.layers]  # dropout between them: in each layer
            units = [("", Embed(self.embedding, self.drop)), *layers, ("", Decode(self.drop, self.decoder))]
            self.__dict__["_units"] = units  # a plain attribute, not registered: the parameters are the model's
        return list(self.__dict__["_units"])

    def extra_repr(self) -> str:
        return f"vocab_size={self.vocab_size}, hidden_size={self.hidden_size}, num_layers={self.num_layers}"


class Embed(Module):
    """Unit 0 of ``LSTMLanguageModel.units()``: token ids [T, B] -> dropout(embedding) [T, B, E]."""

    def __init__(self, embedding: Embedding, drop: Dropout):
        super().__init__()
        self.embedding, self.drop = embedding, drop

    def forward(self, x: Any) -> Tensor:
        tokens = np.asarray(x.data if isinstance(x, Tensor) else x)
        if tokens.ndim != 2 or tokens.dtype.kind not in "iu":
            raise ValueError(
                f"Embed: input must be integer token ids [T, B], got shape {tokens.shape} and dtype {tokens.dtype}"
            )
        return self.drop(self.embedding(tokens))


class Decode(Module):
    """The last unit: h [T, B, H] -> logits [T*B, V] = decoder(dropout(h))."""

    def __init__(self, drop: Dropout, decoder: Linear):
        super().__init__()
        self.drop, self.decoder = drop, decoder

    def forward(self, h: Tensor) -> Tensor:
        return self.decoder(self.drop(h).reshape(h.shape[0] * h.shape[1], h.shape[2]))


class Recurrent(Module):
    """One LSTM layer as a unit: h [T, B, I] -> [T, B, H], carrying its (h, c) from call to call.

    Truncated BPTT inside the unit: ``start_window()`` keeps the states and drops their history,
    ``restart_window()`` goes back to the window's start (to run it again), ``reset(slots)`` forgets them.
    A pipeline runs ``slots`` = m micro-batches of streams per window, call k of a window on slot k mod m.
    """

    def __init__(self, layer: Any):
        super().__init__()
        self.lstm, self.hidden_size = layer, layer.hidden_size  # parameters lstm.weight_ih_l{k}, ...: the model's
        self.reset()

    def reset(self, slots: int | None = None) -> None:
        self.slots = slots or getattr(self, "slots", 1)
        self.states: list[State | None] = [None] * self.slots
        self.begin, self.calls = list(self.states), 0

    def carried(self) -> tuple[np.ndarray, np.ndarray] | None:
        """The carried (h, c), each [B, H]: the slots' groups of streams joined in order (None before a window)."""
        if any(s is None for s in self.states):
            return None
        return tuple(np.concatenate([s[i].data for s in self.states]) for i in (0, 1))  # type: ignore[return-value]

    def restore(self, h: np.ndarray | None = None, c: np.ndarray | None = None) -> None:
        """Forget the states; given (h, c) [B, H], carry them again, cut into the slots' groups of streams."""
        self.reset()
        if h is not None and c is not None:
            dtype = get_default_dtype()
            parts = zip(np.split(h.astype(dtype), self.slots), np.split(c.astype(dtype), self.slots))
            self.states = [(tensor(a), tensor(b)) for a, b in parts]

    def start_window(self) -> None:
        self.states = [None if s is None else (s[0].detach(), s[1].detach()) for s in self.states]
        self.begin, self.calls = list(self.states), 0

    def restart_window(self) -> None:
        self.states, self.calls = list(self.begin), 0

    def forward(self, h: Tensor) -> Tensor:
        k, self.calls = self.calls % self.slots, self.calls + 1
        if self.states[k] is None:
            zeros = tensor(np.zeros((h.shape[1], self.hidden_size), h.dtype))
            self.states[k] = (zeros, zeros)
        h0, c0 = self.states[k]
        out, (h_n,), (c_n,) = self.lstm.run(h, [h0], [c0])  # one direction: one state in, one out
        self.states[k] = (h_n, c_n)
        return out
