"""Issue 11's cases under real MPI processes: the layout fingerprint, p2p descriptions, fp16 pre-scaling, the
timeout through mpi4py requests, and a malformed checkpoint seen by rank 0 alone. Every rank must raise the
same error (a rank that did not would leave the others waiting, and the conftest would abort the job)."""

import json
import zipfile

import numpy as np
import pytest

import minidl
import minidl.distributed as dist
from collectives import MismatchError
from minidl import nn, optim
from minidl.distributed.timeout import CommTimeoutError, TimeoutComm


class TwoWeights(nn.Module):
    def __init__(self, swap):
        super().__init__()
        a, b = np.ones((3, 3)), np.zeros((3, 3))
        if swap:
            self.b, self.a = nn.Parameter(b), nn.Parameter(a)
        else:
            self.a, self.b = nn.Parameter(a), nn.Parameter(b)


def test_parameters_in_another_order_fail_on_every_rank(comm):
    model = TwoWeights(swap=comm.Get_rank() == comm.Get_size() - 1)
    with pytest.raises(MismatchError, match=r"first difference at parameter 0: .*name 'a'.*name 'b'"):
        dist.broadcast_parameters(model, comm=comm)
    with pytest.raises(MismatchError, match="first difference at parameter 0"):
        dist.DistributedOptimizer(
            optim.SGD(model.parameters(), lr=0.1), comm=comm, named_parameters=model.named_parameters()
        )


def test_learning_rates_that_differ_fail_on_every_rank(comm):
    model = TwoWeights(swap=False)
    with pytest.raises(MismatchError, match="first difference at group 0 lr"):
        dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1 * (comm.Get_rank() + 1)), comm=comm)


def test_fp16_average_of_large_gradients_stays_finite(comm):
    p = nn.Parameter(np.zeros(4, np.float32))
    opt = dist.DistributedOptimizer(optim.SGD([p], lr=1.0), compression="fp16", comm=comm, allreduce="mpi")
    p.grad = np.full(4, 40000.0, np.float32)  # P x 40000 > 65504: the sum overflows unless divided first
    opt.step()
    np.testing.assert_allclose(p.data, -40000.0, rtol=1e-3)


def test_p2p_dtype_of_the_same_size_is_refused(comm):
    if comm.Get_size() < 2 or comm.Get_rank() > 1:
        return
    with minidl.no_grad():
        if comm.Get_rank() == 0:
            dist.send(np.arange(4, dtype=np.float64), 1, comm)
        else:
            with pytest.raises(ValueError, match=r"expected int64 \(4,\) from rank 0 .* sent float64 \(4,\)"):
                dist.recv((4,), np.int64, 0, comm)


def test_timeout_through_mpi_requests(comm):
    """Every rank but the last waits in an allreduce the last never joins: CommTimeoutError, then all meet again."""
    wrapped = TimeoutComm(comm.Dup(), 0.5)
    if comm.Get_size() > 1 and comm.Get_rank() < comm.Get_size() - 1:
        with pytest.raises(CommTimeoutError, match="no progress for"):
            dist.allreduce(wrapped, np.ones(4), "ring")
    comm.Barrier()  # (the abandoned requests stay on the Dup'ed communicator, which is then dropped)


def test_malformed_checkpoint_raises_on_every_rank(comm, tmp_path):
    path = str(tmp_path / "bad.npz")
    if comm.Get_rank() == 0:
        manifest = json.dumps({"format": "minidl.checkpoint", "version": 1, "tree": {"type": "dict", "items": 3}})
        import io

        f = io.BytesIO()
        np.save(f, np.frombuffer(manifest.encode(), np.uint8))
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("__minidl_manifest__.npy", f.getvalue())
    with pytest.raises(minidl.CheckpointError, match="bad.npz"):
        dist.load_checkpoint(path, nn.Linear(2, 2), comm=comm)
