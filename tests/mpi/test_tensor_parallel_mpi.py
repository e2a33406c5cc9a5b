"""Under mpiexec -n P: Megatron-style tensor parallelism trains exactly as one process (float64, 1e-8).

The scenarios are the serial tests' (tests/test_tensor_parallel.py), run on MPI.COMM_WORLD, plus
MPI's own Allreduce as the f/g collective.
"""

import pytest
from helpers.model_parallel import train_lm_dense
from helpers.tensor_parallel import (
    STEPS,
    assert_close,
    make_mlp_block,
    mlp_batches,
    train_lm,
    train_mlp,
    train_mlp_dense,
)

import minidl
from minidl import nn
from minidl.distributed.model_parallel import tensor_parallel as tp

pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


@pytest.mark.parametrize("gather_head", [True, False])
def test_tensor_parallel_mlp_equals_one_process(comm, gather_head):
    want = train_mlp_dense()
    got, _ = train_mlp(comm, STEPS, gather_head)
    for g, w in zip(got, want):
        assert_close(g, w)


def test_tensor_parallel_lm_equals_one_process(comm):
    want = train_lm_dense()
    got = train_lm(comm)
    for k in want:
        assert_close(got[k], want[k], what=k)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "mpi"])
def test_parallel_mlp_gradients_with_each_allreduce(comm, algorithm):
    fc1, fc2, _ = make_mlp_block()
    x0 = mlp_batches(1)[0][0]
    x = minidl.tensor(x0, requires_grad=True)
    y = fc2(fc1(x).relu())
    (y * y).sum().backward()
    block = tp.ParallelMLP.from_dense(fc1, nn.ReLU(), fc2, comm=comm, algorithm=algorithm)
    xt = minidl.tensor(x0, requires_grad=True)
    out = block(xt)
    (out * out).sum().backward()
    assert_close(out.data, y.data)
    assert_close(xt.grad, x.grad)
    assert_close(tp.gather_linear(block.fc1, grad=True)[0], fc1.weight.grad)
    assert_close(tp.gather_linear(block.fc2, grad=True)[0], fc2.weight.grad)
