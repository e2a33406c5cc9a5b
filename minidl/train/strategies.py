"""The ``--parallel`` modes, each a strategy for the one training loop; adding a mode is one entry here.

Each strategy sits beside the scheme it drives: ``minidl/distributed/strategy.py`` (what a strategy is, and the
serial one), ``data_parallel/strategy.py`` (data, zero, local-sgd), ``parameter_server/strategy.py``,
``model_parallel/strategy.py`` (model, tensor), ``pipeline/strategy.py``.
"""

from minidl.distributed.data_parallel.strategy import DataParallel, LocalSGD, ZeroParallel
from minidl.distributed.model_parallel.strategy import ModelParallel, TensorParallel
from minidl.distributed.parameter_server.strategy import ParameterServer
from minidl.distributed.pipeline.strategy import PipelineParallel
from minidl.distributed.strategy import Context, Position, SingleProcess, Strategy

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
