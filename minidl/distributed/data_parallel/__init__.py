"""Data parallelism: every rank holds the whole model and trains on its share of each batch.

Read it as a ladder (picotron's order); each step is complete, and a reader may stop at any of them:

1. ``average.py``    ``average_gradients(params, comm)``: allreduce each gradient, divide by p. The whole idea.
2. ``fusion.py``     buckets: the gradients packed into a few large buffers, one allreduce each
                     (``allreduce_buckets``, ``average_bucketed``): one latency per bucket, not per tensor.
3. ``overlap.py``    overlap: each bucket sent on a communication thread as soon as backward has
                     finished its gradients, while backward goes on.

Then the machinery that puts the three behind Horovod's interface: ``optimizer.py``
(``DistributedOptimizer``: wrap any optimizer; gradient accumulation, the ranks' agreement),
``gradient_exchange.py`` (its settings, and one exchange strategy per mode: one rank, after backward, during
backward), ``timing.py`` (compute / wait / communication per step, the timeline).

Beside the ladder: ``allreduce.py`` (the algorithm chosen by name), ``compression.py`` (fp16 on the
wire), ``sparse_rows.py`` (embedding gradients as their non-zero rows), ``sampler.py`` (each rank's
share of a batch), ``sync_batchnorm.py`` (batch statistics over all ranks), ``local_sgd.py``
(average the parameters every k steps instead of the gradients every step), ``zero.py`` (ZeRO:
optimizer state, gradients and parameters sharded over the ranks).
"""

import sys as _sys

from minidl.distributed.data_parallel.allreduce import ALGORITHMS, allreduce
from minidl.distributed.data_parallel.average import average_gradients
from minidl.distributed.data_parallel.fusion import DEFAULT_FUSION_BYTES, allreduce_buckets, average_bucketed
from minidl.distributed.data_parallel.gradient_exchange import ExchangeSettings
from minidl.distributed.data_parallel.local_sgd import LocalSGD, average_parameters
from minidl.distributed.data_parallel.optimizer import DistributedOptimizer
from minidl.distributed.data_parallel.sampler import DistributedSampler, epoch_permutation, shard_batch
from minidl.distributed.data_parallel.sync_batchnorm import SyncBatchNorm, convert_sync_batchnorm
from minidl.distributed.data_parallel.timing import StepTimings
from minidl.distributed.data_parallel.zero import ZeroOptimizer

# the module's old name (before it said what it exchanges): ``...data_parallel.exchange`` imports still work
exchange = _sys.modules[f"{__name__}.exchange"] = _sys.modules[f"{__name__}.gradient_exchange"]

__all__ = [
    "ZeroOptimizer",
    "ALGORITHMS",
    "DEFAULT_FUSION_BYTES",
    "DistributedOptimizer",
    "DistributedSampler",
    "ExchangeSettings",
    "LocalSGD",
    "StepTimings",
    "SyncBatchNorm",
    "allreduce",
    "allreduce_buckets",
    "average_bucketed",
    "average_gradients",
    "average_parameters",
    "convert_sync_batchnorm",
    "epoch_permutation",
    "shard_batch",
]
