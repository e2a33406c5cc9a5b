"""Model parallelism: each rank holds part of the model.

``p2p.py`` (send and recv as differentiable ops: the chain rule across ranks), ``layerwise.py`` (rank
r holds a contiguous block of layers), ``tensor_parallel.py`` (Megatron: each layer's matrices split
across ranks).
"""

from minidl.distributed.model_parallel.layerwise import (
    LMStage,
    SequentialStage,
    clip_grad_norm_split,
    gather_state_dict,
    partition,
)
from minidl.distributed.model_parallel.p2p import StageBoundary, recv, recv_meta, send, send_meta
from minidl.distributed.model_parallel.tensor_parallel import (
    ColumnParallelLinear,
    ParallelMLP,
    RowParallelLinear,
    TensorParallelLM,
    copy_to_parallel_region,
    gather_linear,
    reduce_from_parallel_region,
    shard_linear,
    vocab_parallel_cross_entropy,
)

__all__ = [
    "ColumnParallelLinear",
    "LMStage",
    "ParallelMLP",
    "RowParallelLinear",
    "SequentialStage",
    "StageBoundary",
    "TensorParallelLM",
    "clip_grad_norm_split",
    "copy_to_parallel_region",
    "gather_linear",
    "gather_state_dict",
    "partition",
    "recv",
    "recv_meta",
    "reduce_from_parallel_region",
    "send",
    "send_meta",
    "shard_linear",
    "vocab_parallel_cross_entropy",
]
