"""BatchNorm1d/2d against PyTorch: train and eval mode, running statistics after several steps, state_dicts."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_reference import (  # noqa: E402
    assert_state_dicts_equal,
    compare_forward_backward,
    load_into_minidl,
    load_into_torch,
)

from minidl import nn  # noqa: E402


@pytest.mark.parametrize(
    "name,shape,kwargs",
    [
        ("BatchNorm1d", (8, 4), {}),
        ("BatchNorm1d", (4, 3, 5), {"momentum": 0.3}),
        ("BatchNorm2d", (4, 3, 5, 5), {}),
        ("BatchNorm2d", (3, 2, 4, 4), {"affine": False, "eps": 1e-3}),
        ("BatchNorm2d", (3, 2, 4, 4), {"momentum": None}),
    ],
)
def test_batchnorm_parity_train_then_eval(rng, name, shape, kwargs):
    ours, theirs = getattr(nn, name)(shape[1], **kwargs), getattr(torch.nn, name)(shape[1], **kwargs)
    if ours.weight is not None:
        with torch.no_grad():
            theirs.weight.uniform_(0.5, 1.5)
            theirs.bias.uniform_(-0.5, 0.5)
    load_into_minidl(ours, theirs)
    for step in range(3):  # running statistics after a few training steps
        x = (rng.standard_normal(shape) * (1 + step) + step).astype(np.float32)
        compare_forward_backward(ours, theirs, x, seed=step, rtol=1e-4, atol=1e-5)
        for p in list(ours.parameters()):
            p.grad = None
        theirs.zero_grad()
    assert_state_dicts_equal(ours, theirs, rtol=1e-5, atol=1e-6)  # running_mean/var and num_batches_tracked
    ours.eval()
    theirs.eval()
    compare_forward_backward(ours, theirs, rng.standard_normal(shape).astype(np.float32), rtol=1e-4, atol=1e-5)


def test_batchnorm_state_dict_both_ways(rng):
    theirs = torch.nn.BatchNorm2d(3)
    theirs(torch.randn(4, 3, 2, 2) * 3 + 1)
    ours = nn.BatchNorm2d(3)
    load_into_minidl(ours, theirs)
    assert_state_dicts_equal(ours, theirs, rtol=0, atol=0)
    ours(__import__("minidl").tensor(rng.standard_normal((4, 3, 2, 2)).astype(np.float32)))
    theirs2 = torch.nn.BatchNorm2d(3)
    load_into_torch(theirs2, ours)
    assert_state_dicts_equal(ours, theirs2, rtol=0, atol=0)
    assert int(theirs2.num_batches_tracked) == 2
