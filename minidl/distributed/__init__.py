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

Every rank must take the same optimizer steps. The classic mistake is to evaluate on one rank alone
(``if dist.rank() == 0: evaluate(model)``) with a collective inside, an allreduce of the metric, say:
rank 0's allreduce then meets the others' next training step. Each gradient exchange starts by
agreeing on the step (``lockstep.py``), so this, a rank that runs out of batches early, or an
``add_param_group`` on one rank ends with the same error on every rank, naming each rank's call and
step, instead of a silent hang. Evaluate on every rank (each on its share), or without collectives.

Where each scheme lives
-----------------------
``comm.py``             which communicator: ``init``, ``rank``, ``size``, ``barrier``; ``run`` / ``abort_on_error``
                        (an exception on any rank ends the job instead of hanging it)
``state.py``            start identical: ``broadcast_parameters``, ``broadcast_optimizer_state``
``wire.py``             a state as one buffer (JSON header + raw arrays, no pickle): ``broadcast_state``,
                        ``gather_states``, ``scatter_states``, ``send_state`` / ``recv_state``
``checkpoint.py``       ``save_checkpoint`` / ``load_checkpoint``: a resumed run continues bitwise;
                        ``checkpoint_schedule.py``: ``--save-every`` files, pruning, ``--inject-failure``
``lockstep.py``         every optimizer step, and the end of a run, agreed on by all ranks first: ranks at
                        different steps raise on every rank, naming each rank's call and step
``counting.py``         ``CountingComm``: messages and bytes each rank sends, and to whom
``data_parallel/``      the whole model on every rank: ``DistributedOptimizer``, ``allreduce``, fusion,
                        compression, ``StepTimings``, ``DistributedSampler``, ``SyncBatchNorm``, ``LocalSGD``
``model_parallel/``     part of the model on each rank: differentiable ``send`` / ``recv`` (p2p.py),
                        layer-wise stages (layerwise.py), Megatron tensor parallelism (tensor_parallel.py)
``pipeline/``           micro-batches through the stages: ``Pipeline``, GPipe and 1F1B schedules, the bubble
``parameter_server/``   ``ParameterServer`` and ``PSWorker`` (synchronous, asynchronous, bounded staleness)
``strategy.py``         how ``python -m minidl.train``'s one loop drives a scheme: the serial strategy here, each
                        scheme's in its folder (``data_parallel/strategy.py``, ...); not imported by this package
``usage.py``            a command-line mistake reported once per MPI job, and every rank given the same flags

Every function takes an optional ``comm=``; ``None`` means the one ``init()`` stored (per thread, so
the thread-ranks of ``collectives.simulate(P, fn)`` each call ``dist.init(comm)`` with their own).
In minidl only this package imports mpi4py (and minidl/tools/info.py, which names the MPI library without starting
it); in ``collectives``, which supplies the algorithms and the in-process communicator, only what runs on a real MPI
job does (nodes.py's shared-memory nodes, bench.py, calibrate, the kit's --mpi mode). Each imports it inside the
function that needs it, so ``import minidl`` and ``import collectives`` work without MPI (tests/test_import_graph.py).
"""

from minidl.distributed.checkpoint import checkpoint_info, load_checkpoint, rng_state, save_checkpoint, set_rng_state
from minidl.distributed.comm import (
    abort_on_error,
    barrier,
    get_comm,
    init,
    install_excepthook,
    is_initialized,
    rank,
    run,
    shutdown,
    size,
)
from minidl.distributed.counting import CountingComm, TrafficComm
from minidl.distributed.data_parallel import *  # noqa: F403
from minidl.distributed.data_parallel import __all__ as _data_parallel
from minidl.distributed.model_parallel import *  # noqa: F403
from minidl.distributed.model_parallel import __all__ as _model_parallel
from minidl.distributed.parameter_server import *  # noqa: F403
from minidl.distributed.parameter_server import __all__ as _parameter_server
from minidl.distributed.pipeline import *  # noqa: F403
from minidl.distributed.pipeline import __all__ as _pipeline
from minidl.distributed.state import broadcast_optimizer_state, broadcast_parameters
from minidl.distributed.timeline import Timeline
from minidl.distributed.wire import broadcast_state, gather_states, scatter_states

__all__ = [
    "CountingComm",
    "Timeline",
    "TrafficComm",
    "abort_on_error",
    "barrier",
    "broadcast_optimizer_state",
    "broadcast_parameters",
    "broadcast_state",
    "gather_states",
    "get_comm",
    "init",
    "install_excepthook",
    "is_initialized",
    "checkpoint_info",
    "load_checkpoint",
    "rank",
    "rng_state",
    "run",
    "save_checkpoint",
    "scatter_states",
    "set_rng_state",
    "shutdown",
    "size",
    *_data_parallel,
    *_model_parallel,
    *_parameter_server,
    *_pipeline,
]
