"""Step 3 of data parallelism, overlap: each bucket's allreduce starts as soon as its gradients are final, while backward goes on.

Backward produces gradients from the last layer to the first. Without overlap every allreduce waits
for the whole backward; with it (PyTorch DDP, Horovod), a bucket of gradients is sent the moment its
last gradient is added, and its communication hides behind the backward of the earlier layers. The
exposed communication of a step shrinks from the whole allreduce time to whatever outlasts the
backward: for buckets b_1..b_K (in the order they become ready, at times r_k, taking c_k each, one
at a time on one channel) the last one ends at e_K, where e_k = max(r_k, e_{k-1}) + c_k.

How it works here:
- the fusion plan takes the parameters in reverse order of the forward, so the first bucket fills first;
- every parameter carries a post-accumulate-grad hook (minidl.autograd counts the gradients a leaf
  will receive in this backward and calls the hook after the last one);
- a bucket is launched when it and every bucket before it are ready, so all ranks start the same
  allreduces in the same order (the collective calls must match across ranks);
- the allreduces run one at a time on a communication thread. Every MPI call of a step's gradients is
  made from that thread while backward runs on the main one, so MPI must grant at least
  MPI_THREAD_SERIALIZED (mpi4py asks for MPI_THREAD_MULTIPLE by default); this is checked.
- ``finish()`` (from ``DistributedOptimizer.synchronize``) launches what is left, in order, and waits.

``BucketOverlap`` is only the bookkeeping (which bucket is ready, one thread, in order); the exchange of
a bucket is given to it (gradient_exchange.py's ``DuringBackward`` gives it fusion.py's ``allreduce_buckets``).

The buckets and the per-bucket allreduce are those of the plain path, so the averaged gradients are
bitwise the same with and without overlap.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from minidl.distributed.data_parallel.fusion import Bucket
from minidl.tensor import Tensor


def check_thread_level(comm: Any) -> None:
    """Refuse a real MPI communicator whose library runs without MPI_THREAD_SERIALIZED or better."""
    from minidl.distributed.timeout import base_comm

    comm = base_comm(comm)  # under a TimeoutComm or CountingComm
    if type(comm).__module__.split(".")[0] != "mpi4py":
        return  # the simulated communicator is thread-safe
    from mpi4py import MPI

    if MPI.Query_thread() < MPI.THREAD_SERIALIZED:
        raise RuntimeError(
            "overlap=True calls MPI from a communication thread, which needs MPI_THREAD_SERIALIZED or better; "
            f"this MPI runs at thread level {MPI.Query_thread()} (set mpi4py.rc.thread_level = 'multiple')"
        )


class BucketOverlap:
    """Runs ``exchange(k, *context())`` for bucket k on a communication thread once buckets 0..k are ready.

    ``context()`` is called on the main thread when bucket k is launched (what the exchange needs to know
    of this step: its scale, its number); ``exchange`` then runs on the communication thread.
    """

    def __init__(
        self, buckets: list[Bucket], comm: Any, exchange: Callable[..., Any], context: Callable[[], tuple] = tuple
    ):
        check_thread_level(comm)
        self.buckets, self.exchange, self.context = buckets, exchange, context
        self.bucket_of = {id(p): k for k, b in enumerate(buckets) for p in b.params}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minidl-allreduce")
        self._reset()

    def _reset(self) -> None:
        self.ready = [0] * len(self.buckets)
        self.launched = 0
        self.futures: list[Future] = []

    def param_ready(self, p: Tensor) -> None:
        """The hook: ``p``'s gradient is final for this backward."""
        if id(p) not in self.bucket_of:
            return
        self.ready[self.bucket_of[id(p)]] += 1
        while self.launched < len(self.buckets) and self.ready[self.launched] == len(
            self.buckets[self.launched].params
        ):
            self._launch(self.launched)

    def _launch(self, k: int) -> None:
        self.launched = k + 1
        self.futures.append(self.pool.submit(self.exchange, k, *self.context()))

    def finish(self) -> None:
        """Launch the buckets not launched yet, in order, and wait for every exchange of this step."""
        while self.launched < len(self.buckets):
            self._launch(self.launched)
        try:
            for future in self.futures:
                future.result()  # re-raises an error of the communication thread here
        finally:
            self._reset()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
