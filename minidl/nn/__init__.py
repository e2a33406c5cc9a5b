"""Layers, losses and the Module container (names, shapes and state_dict layouts as PyTorch's)."""

from minidl.nn import init
from minidl.nn.activation import (
    CELU,
    ELU,
    GELU,
    Hardswish,
    LeakyReLU,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softplus,
    Softsign,
    Tanh,
)
from minidl.nn.container import Flatten, Identity, Sequential
from minidl.nn.conv import Conv2d
from minidl.nn.dropout import Dropout
from minidl.nn.embedding import Embedding
from minidl.nn.ghost_norm import GhostBatchNorm2d
from minidl.nn.linear import Linear
from minidl.nn.loss import BCEWithLogitsLoss, CrossEntropyLoss, MSELoss, NLLLoss
from minidl.nn.module import Module, Parameter, StateDictError
from minidl.nn.norm import BatchNorm1d, BatchNorm2d
from minidl.nn.pooling import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d
from minidl.nn.resnet import BasicBlock, Bottleneck, ResNet, resnet, resnet_imagenet
from minidl.nn.rnn import LSTM, LSTMCell, LSTMLayer

__all__ = [
    "CELU",
    "ELU",
    "GELU",
    "Hardswish",
    "LeakyReLU",
    "Mish",
    "SiLU",
    "Softplus",
    "Softsign",
    "AdaptiveAvgPool2d",
    "AvgPool2d",
    "BCEWithLogitsLoss",
    "BasicBlock",
    "Bottleneck",
    "BatchNorm1d",
    "BatchNorm2d",
    "GhostBatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "Identity",
    "LSTM",
    "LSTMCell",
    "LSTMLayer",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "ReLU6",
    "ResNet",
    "Sequential",
    "Sigmoid",
    "StateDictError",
    "Tanh",
    "init",
    "resnet",
    "resnet_imagenet",
]
