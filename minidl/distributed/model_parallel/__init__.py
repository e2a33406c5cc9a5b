"""Model parallelism: each rank holds part of the model.

``p2p.py`` (send and recv as differentiable ops: the chain rule across ranks), ``layerwise.py`` (rank
r holds a contiguous block of a model's units), ``tensor_parallel.py`` (Megatron: a layer's matrices split
across ranks; ``regions.py``: the shards and the f / g operators it is built on).
"""

from minidl.distributed.model_parallel.layerwise import (
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
    copy_to_parallel_region,
    gather_linear,
    reduce_from_parallel_region,
    shard_last_unit,
    shard_linear,
    vocab_parallel_cross_entropy,
)

__all__ = [
    "ColumnParallelLinear",
    "ParallelMLP",
    "RowParallelLinear",
    "SequentialStage",
    "StageBoundary",
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
    "shard_last_unit",
    "shard_linear",
    "vocab_parallel_cross_entropy",
]
