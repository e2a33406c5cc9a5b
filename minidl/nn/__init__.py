"""Layers, losses and the Module container."""

from minidl.nn.module import Module, Parameter

__all__ = ["Module", "Parameter"]
from minidl.nn.rnn import LSTM, LSTMCell  # noqa: E402

__all__ += ["LSTM", "LSTMCell"]
from minidl.nn import init  # noqa: E402, F401
from minidl.nn.activation import ReLU, Sigmoid, Tanh  # noqa: E402
from minidl.nn.container import Flatten, Identity, Sequential  # noqa: E402
from minidl.nn.conv import Conv2d  # noqa: E402
from minidl.nn.dropout import Dropout  # noqa: E402
from minidl.nn.embedding import Embedding  # noqa: E402
from minidl.nn.linear import Linear  # noqa: E402
from minidl.nn.norm import BatchNorm1d, BatchNorm2d  # noqa: E402
from minidl.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d  # noqa: E402
from minidl.nn.resnet import BasicBlock, ResNet, resnet  # noqa: E402

__all__ += ["AdaptiveAvgPool2d", "AvgPool2d", "BasicBlock", "BatchNorm1d", "BatchNorm2d", "Conv2d", "Dropout",
            "Embedding", "Flatten", "Identity", "Linear", "MaxPool2d", "ReLU", "ResNet", "Sequential", "Sigmoid",
            "Tanh", "init", "resnet"]
