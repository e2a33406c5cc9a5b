"""Layers, losses and the Module container."""

from minidl.nn.module import Module, Parameter

__all__ = ["Module", "Parameter"]
from minidl.nn.rnn import LSTM, LSTMCell  # noqa: E402

__all__ += ["LSTM", "LSTMCell"]
