"""Data-parallel training across MPI ranks, Horovod-style: ``import minidl.distributed as dist``.

Every rank holds the whole model, trains on its own share of each batch, and averages gradients
with an allreduce before every update, so the replicas stay identical and P ranks with batch b
take the same steps as one process with batch P*b.

A complete program (run it with ``mpiexec -n 4 python train.py``)::

    import minidl.distributed as dist
    from minidl import nn, optim
    import minidl.nn.functional as F

    def main():
        dist.init()                                  # MPI.COMM_WORLD (or dist.init(comm))
        model = make_model()
        model = dist.convert_sync_batchnorm(model)   # optional: batch statistics over all ranks
        dist.broadcast_parameters(model, root=0)     # every replica starts from rank 0's weights
        opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1 * dist.size()),
                                        allreduce="ring")   # linear scaling rule (Goyal et al. 2017)
        sampler = dist.DistributedSampler(len(data), batch_size=32)   # 32 per rank
        for epoch in range(epochs):
            sampler.set_epoch(epoch)
            for idx in sampler:
                opt.zero_grad()
                F.cross_entropy(model(x[idx]), y[idx]).backward()
                opt.step()
            if dist.rank() == 0:
                print(opt.timings.summary())           # compute / wait / communication per step
            dist.save_checkpoint("ckpt.npz", model, opt, state={"epoch": epoch + 1})

    dist.run(main)    # an exception on any rank prints with its rank and aborts the job (no hang)

API
---
Communicator (per thread, so ``collectives.simulate`` ranks, which are threads, each have their own):
    ``init(comm=None)``, ``rank()``, ``size()``, ``barrier()``, ``get_comm()``, ``is_initialized()``,
    ``shutdown()``. Every function below also takes ``comm=`` to override it.
Start identical:
    ``broadcast_parameters(module_or_state, root=0)``: parameters and buffers;
    ``broadcast_optimizer_state(optimizer, root=0)``; ``broadcast_state(tree, root=0)`` for any
    nested dict of arrays and numbers (sent as bytes: JSON header + raw arrays, no pickle).
    A rank whose model or optimizer (class, groups, hyperparameter names, shapes) differs from the
    root's raises an error naming the difference, and every other rank a MismatchError quoting it.
Gradient averaging:
    ``DistributedOptimizer(optimizer, allreduce="ring", op="average", fusion_bytes=64 MiB,
    compression=None, backward_passes_per_step=1)`` with ``allreduce`` one of "ring", "tree",
    "naive", "recursive_doubling", "rabenseifner", "auto" (collectives' cost-model choice) or
    "mpi" (MPI's own Allreduce); ``compression="fp16"`` halves the bytes on the wire. It is an
    ``Optimizer`` (LR schedulers accept it); ``param_groups``, ``state``, ``state_dict()`` are the
    wrapped optimizer's. ``step()`` returns True when it updated (every k-th call with
    ``backward_passes_per_step=k``; ``zero_grad()`` then clears only after updates);
    ``synchronize()`` averages now (before gradient clipping); ``will_update``; ``timings``
    (``StepTimings``: ``print(opt.timings)``, ``opt.timings.summary()``); ``buckets`` (fusion plan).
    ``average_gradients(params, algorithm)``: the same averaging without an optimizer;
    ``allreduce_buckets(buckets, comm, algorithm, scale)``: the pack / allreduce / unpack of a fusion plan.
    ``allreduce(comm, x, algorithm, op)``: one allreduce through any of the algorithms above.
Data:
    ``DistributedSampler(n, batch_size, seed=0)``: per-rank index batches, one shuffle per epoch
    (``set_epoch``), global batch i split across ranks, ``state_dict()`` for resuming mid-epoch;
    ``epoch_permutation``, ``shard_batch``. For a language model use
    ``minidl.data.batchify(ids, b, rank=dist.rank(), world=dist.size())``: rank r's contiguous streams.
Batch norm across ranks:
    ``SyncBatchNorm`` and ``convert_sync_batchnorm(module)``: batch statistics over the global batch
    (allreduce of per-channel count/sum/sum of squares forward, of the two gradient sums backward);
    plain ``nn.BatchNorm2d`` normalizes each rank's own batch (Goyal et al.'s choice). An empty
    local batch contributes zero counts; a rank's bad input (channels, dims, dtype) raises on every rank.
Checkpoints:
    ``save_checkpoint(path, model, optimizer, scheduler, state={...}, rank_state={...})`` on every
    rank (rank 0 writes; per-rank state such as ``rng_state(generator)`` and LSTM hidden states is
    gathered); ``state, rank_state = load_checkpoint(path, model, optimizer, scheduler)``;
    ``set_rng_state(generator, s)``. A resumed run continues bitwise as if never interrupted.
Model parallelism (p2p.py):
    ``send(x, dst)`` / ``recv(shape, dtype, src)``: differentiable point-to-point ops (backward sends
    the gradient back); ``send_meta`` / ``recv_meta`` (shape headers); ``StageBoundary``;
    ``CountingComm(comm)``: messages and bytes a rank sends.
    model_parallel.py: ``SequentialStage(seq)`` and ``LMStage(lm)`` (rank r holds stage r; ``stage(x)``
    returns the output on the last rank, a send token elsewhere; ``.backward()`` on either),
    ``gather_state_dict(stage)``, ``clip_grad_norm_split``, ``partition``.
    tensor_parallel.py (Megatron): ``ColumnParallelLinear``, ``RowParallelLinear``, ``ParallelMLP``,
    ``copy_to_parallel_region`` (f) / ``reduce_from_parallel_region`` (g), ``vocab_parallel_cross_entropy``,
    ``TensorParallelLM`` (the LM's decoder and softmax split by vocabulary),
    ``shard_linear`` / ``gather_linear``.
Pipelining (pipeline.py, pipeline_schedule.py; tutorial 06):
    ``Pipeline(stage_module, loss_fn, schedule="gpipe"|"1f1b", micro_batches=m, comm=...)``:
    ``train_step(x, y)`` accumulates the mini-batch's gradients (= one process's), records ``events``
    (stage, micro-batch, F/B, start, end) and ``peak_stashed``; ``gather_events()``;
    ``split_sequential(model, p, s)``; ``make_grid(comm, pp) -> Grid`` (dp x pp via ``comm.Split``);
    ``bubble_fraction``, ``bubble_formula``, ``ideal_events``, ``plot_schedule``.
Parameter server and local SGD (the other data-parallel schemes; tutorial 07):
    ``is_server(comm, num_servers)``; ``ParameterServer(model, make_optimizer, num_servers=1,
    asynchronous=False, staleness_bound=None).serve()`` on ranks 0..S-1 returns ``ServerStats``
    (staleness per update: mean / max / histogram); ``PSWorker(model, num_servers=1, asynchronous=False,
    fetch_every=1, staleness_bound=None)`` on the others: ``zero_grad()``, ``step(closure=None)``
    (push, pull), ``close()``; ``collect_parameters(model, comm, num_servers)`` (parameter_server.py).
    ``LocalSGD(optimizer, average_every=k)`` and ``average_parameters(params)`` (local_sgd.py);
    ``TrafficComm(comm)`` counts bytes sent per destination (traffic.py); ``minidl.distributed.compare``
    runs every scheme on one task and tabulates throughput, bytes per step and loss.
Failures:
    ``run(main, *args)`` and ``install_excepthook()``: an uncaught exception on any rank prints its
    traceback with the rank and calls ``MPI_Abort``, so the job ends instead of hanging.

Only this package imports mpi4py; ``collectives`` supplies the algorithms and the simulated
communicator (``collectives.simulate(P, fn)`` runs fn(comm) on P thread-ranks: call
``dist.init(comm)`` inside fn).
"""

from minidl.distributed.allreduce import ALGORITHMS, allreduce
from minidl.distributed.broadcast import (
    broadcast_optimizer_state,
    broadcast_parameters,
    broadcast_state,
    gather_states,
    scatter_states,
)
from minidl.distributed.checkpoint import load_checkpoint, rng_state, save_checkpoint, set_rng_state
from minidl.distributed.context import barrier, get_comm, init, is_initialized, rank, shutdown, size
from minidl.distributed.launch import abort_on_error, install_excepthook, run
from minidl.distributed.local_sgd import LocalSGD, average_parameters
from minidl.distributed.model_parallel import (
    LMStage,
    SequentialStage,
    clip_grad_norm_split,
    gather_state_dict,
    partition,
)
from minidl.distributed.optimizer import (
    DEFAULT_FUSION_BYTES,
    DistributedOptimizer,
    allreduce_buckets,
    average_gradients,
)
from minidl.distributed.p2p import CountingComm, StageBoundary, recv, recv_meta, send, send_meta
from minidl.distributed.parameter_server import (
    ParameterServer,
    PSWorker,
    ServerStats,
    collect_parameters,
    is_server,
)
from minidl.distributed.pipeline import Grid, Pipeline, make_grid, split_sequential
from minidl.distributed.pipeline_schedule import bubble_formula, bubble_fraction, ideal_events, plot_schedule
from minidl.distributed.sampler import DistributedSampler, epoch_permutation, shard_batch
from minidl.distributed.sync_batchnorm import SyncBatchNorm, convert_sync_batchnorm
from minidl.distributed.tensor_parallel import (
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
from minidl.distributed.timing import StepTimings
from minidl.distributed.traffic import TrafficComm

__all__ = [
    "ALGORITHMS",
    "DEFAULT_FUSION_BYTES",
    "DistributedOptimizer",
    "DistributedSampler",
    "StepTimings",
    "SyncBatchNorm",
    "abort_on_error",
    "allreduce",
    "allreduce_buckets",
    "average_gradients",
    "barrier",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "broadcast_state",
    "convert_sync_batchnorm",
    "epoch_permutation",
    "gather_states",
    "get_comm",
    "init",
    "install_excepthook",
    "is_initialized",
    "load_checkpoint",
    "rank",
    "rng_state",
    "run",
    "save_checkpoint",
    "scatter_states",
    "set_rng_state",
    "shard_batch",
    "shutdown",
    "size",
    "CountingComm",
    "StageBoundary",
    "recv",
    "recv_meta",
    "send",
    "send_meta",
    "LMStage",
    "SequentialStage",
    "clip_grad_norm_split",
    "gather_state_dict",
    "partition",
    "ColumnParallelLinear",
    "ParallelMLP",
    "RowParallelLinear",
    "TensorParallelLM",
    "copy_to_parallel_region",
    "gather_linear",
    "reduce_from_parallel_region",
    "shard_linear",
    "vocab_parallel_cross_entropy",
]
__all__ += [  # parameter server, local SGD, traffic counting
    "LocalSGD",
    "PSWorker",
    "ParameterServer",
    "ServerStats",
    "average_parameters",
    "TrafficComm",
    "collect_parameters",
    "is_server",
]
__all__ += [  # pipelining
    "Grid",
    "Pipeline",
    "bubble_formula",
    "bubble_fraction",
    "ideal_events",
    "make_grid",
    "plot_schedule",
    "split_sequential",
]
