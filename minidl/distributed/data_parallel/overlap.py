"""Overlap: each bucket's allreduce starts as soon as its gradients are final, while backward goes on.

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

The buckets and the per-bucket allreduce are those of the plain path, so the averaged gradients are
bitwise the same with and without overlap.
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

from minidl.distributed.data_parallel.fusion import allreduce_buckets
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
    """Launches the buckets of a ``DistributedOptimizer`` as their gradients become final."""

    def __init__(self, opt: Any):
        check_thread_level(opt.comm)
        self.opt = opt
        self.bucket_of = {id(p): k for k, b in enumerate(opt.buckets) for p in b.params}
        self.pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="minidl-allreduce")
        self._reset()

    def _reset(self) -> None:
        self.ready = [0] * len(self.opt.buckets)
        self.launched = 0
        self.futures: list[Future] = []

    def param_ready(self, p: Tensor) -> None:
        """The hook: ``p``'s gradient is final for this backward."""
        if not self.opt.will_update or id(p) not in self.bucket_of:
            return  # an accumulating pass communicates nothing
        self.ready[self.bucket_of[id(p)]] += 1
        buckets = self.opt.buckets
        while self.launched < len(buckets) and self.ready[self.launched] == len(buckets[self.launched].params):
            self._launch(self.launched)

    def _launch(self, k: int) -> None:
        self.launched = k + 1
        self.futures.append(self.pool.submit(self._allreduce, k, self.opt._scale(), not self.opt._layout_checked))

    def _allreduce(self, k: int, scale: float, check: bool) -> None:
        began, opt = time.perf_counter(), self.opt
        if not allreduce_buckets(
            [opt.buckets[k]], opt.comm, opt.algorithm, scale, opt.compression, check, opt.overflow
        ):
            opt._overflowed = True  # overflow="skip": step() skips this update (an fp16 sum that is not finite)
        opt.record(k, began, "comm")

    def finish(self) -> None:
        """Launch the buckets not launched yet, in order, and wait for every allreduce of this step."""
        while self.launched < len(self.opt.buckets):
            self._launch(self.launched)
        try:
            for future in self.futures:
                future.result()  # re-raises an error of the communication thread here
        finally:
            self._reset()

    def close(self) -> None:
        self.pool.shutdown(wait=True)
