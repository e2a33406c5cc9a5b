"""Data parallelism: every rank holds the whole model and trains on its share of each batch.

``optimizer.py`` (DistributedOptimizer: gradients averaged before each update), ``allreduce.py`` (the
algorithm chosen by name), ``fusion.py`` (gradients packed into buckets, each bucket allreduced),
``compression.py`` (fp16 on the wire), ``timing.py`` (compute / wait / communication per step),
``sampler.py`` (each rank's share of a batch), ``sync_batchnorm.py`` (batch statistics over all ranks),
``local_sgd.py`` (average the parameters every k steps instead of the gradients every step).
"""

from minidl.distributed.data_parallel.allreduce import ALGORITHMS, allreduce
from minidl.distributed.data_parallel.local_sgd import LocalSGD, average_parameters
from minidl.distributed.data_parallel.optimizer import (
    DEFAULT_FUSION_BYTES,
    DistributedOptimizer,
    allreduce_buckets,
    average_gradients,
)
from minidl.distributed.data_parallel.sampler import DistributedSampler, epoch_permutation, shard_batch
from minidl.distributed.data_parallel.sync_batchnorm import SyncBatchNorm, convert_sync_batchnorm
from minidl.distributed.data_parallel.timing import StepTimings
from minidl.distributed.data_parallel.zero import ZeroOptimizer

__all__ = [
    "ZeroOptimizer",
    "ALGORITHMS",
    "DEFAULT_FUSION_BYTES",
    "DistributedOptimizer",
    "DistributedSampler",
    "LocalSGD",
    "StepTimings",
    "SyncBatchNorm",
    "allreduce",
    "allreduce_buckets",
    "average_gradients",
    "average_parameters",
    "convert_sync_batchnorm",
    "epoch_permutation",
    "shard_batch",
]
