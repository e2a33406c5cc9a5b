"""The ``--parallel`` modes, each a strategy for the one training loop; adding a mode is one entry here."""

from minidl.train.strategies.base import Context, Position, SingleProcess, Strategy
from minidl.train.strategies.data import DataParallel, ZeroParallel
from minidl.train.strategies.pipeline import PipelineParallel
from minidl.train.strategies.schemes import LocalSGD, ParameterServer
from minidl.train.strategies.split import ModelParallel, TensorParallel

STRATEGIES: dict[str, type[Strategy]] = {
    "none": Strategy,
    "data": DataParallel,
    "zero": ZeroParallel,
    "ps": ParameterServer,
    "local-sgd": LocalSGD,
    "model": ModelParallel,
    "tensor": TensorParallel,
    "pipeline": PipelineParallel,
}

__all__ = ["STRATEGIES", "Context", "Position", "SingleProcess", "Strategy"]
