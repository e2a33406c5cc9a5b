"""SyncBatchNorm under mpiexec: the per-rank moments merged by Chan's formula (allgather, MPI's own or the
collectives'), as accurate as one process on the global batch, with float32 and float64 inputs."""

import numpy as np
import pytest

import minidl
from minidl import nn
from minidl.distributed import SyncBatchNorm


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "mpi"])
@pytest.mark.parametrize("dtype, mean, std, atol", [(np.float64, 1e6, 1e-2, 1e-7), (np.float32, 1e4, 1.0, 3e-6)])
def test_large_mean_equals_one_process(comm, algorithm, dtype, mean, std, atol):
    rank, p = comm.Get_rank(), comm.Get_size()
    rng = np.random.default_rng(7)
    sizes = [1 + (3 * r) % 4 for r in range(p)]  # uneven shares of the global batch
    xs = [(mean + std * rng.standard_normal((b, 3, 5))).astype(dtype) for b in sizes]
    g = [rng.standard_normal(x.shape).astype(dtype) for x in xs]
    bn = SyncBatchNorm(3, dtype=dtype, comm=comm, algorithm=algorithm, eps=1e-5 * std**2)
    x = minidl.tensor(xs[rank], requires_grad=True)
    y = bn(x)
    y.backward(g[rank])

    x64 = np.concatenate(xs).astype(np.float64)
    m, v = x64.mean(axis=(0, 2), keepdims=True), x64.var(axis=(0, 2), keepdims=True)
    ref = np.split((x64 - m) / np.sqrt(v + 1e-5 * std**2), np.cumsum(sizes)[:-1])[rank]
    assert np.abs(y.data - ref).max() < atol
    one = nn.BatchNorm1d(3, dtype=np.float64, eps=1e-5 * std**2)
    whole = minidl.tensor(x64, requires_grad=True)
    one(whole).backward(np.concatenate(g).astype(np.float64))
    np.testing.assert_allclose(bn.running_mean, one.running_mean, rtol=1e-6)
    np.testing.assert_allclose(bn.running_var, one.running_var, rtol=1e-5)
    dx_ref = np.split(whole.grad, np.cumsum(sizes)[:-1])[rank]
    np.testing.assert_allclose(x.grad, dx_ref, rtol=1e-3 if dtype == np.float32 else 1e-7, atol=1e-3 * std)
