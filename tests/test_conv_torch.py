"""Conv2d and the pools against PyTorch on the same weights: forward, input and weight gradients, state_dicts."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_reference import assert_state_dicts_equal, compare_forward_backward, load_into_minidl  # noqa: E402

from minidl import nn  # noqa: E402


@pytest.mark.parametrize(
    "args",
    [
        dict(in_channels=3, out_channels=4, kernel_size=3, stride=1, padding=1),
        dict(in_channels=2, out_channels=5, kernel_size=(3, 2), stride=(2, 1), padding=(1, 0)),
        dict(in_channels=4, out_channels=3, kernel_size=1, stride=2, padding=0, bias=False),
    ],
)
def test_conv2d_parity(rng, args):
    ours, theirs = nn.Conv2d(**args), torch.nn.Conv2d(**args)
    load_into_minidl(ours, theirs)
    assert_state_dicts_equal(ours, theirs, rtol=0, atol=0)
    compare_forward_backward(
        ours, theirs, rng.standard_normal((2, args["in_channels"], 9, 8)).astype(np.float32), rtol=1e-4, atol=1e-5
    )


@pytest.mark.parametrize(
    "make",
    [
        lambda m: m.MaxPool2d(2),
        lambda m: m.MaxPool2d(3, stride=2, padding=1),
        lambda m: m.MaxPool2d((3, 2), stride=1),
        lambda m: m.AvgPool2d(2),
        lambda m: m.AvgPool2d(3, stride=2, padding=1),
        lambda m: m.AvgPool2d(3, stride=1, padding=1, count_include_pad=False),
        lambda m: m.AdaptiveAvgPool2d(1),
        lambda m: m.AdaptiveAvgPool2d((3, 2)),
    ],
)
def test_pool_parity(rng, make):
    x = rng.standard_normal((2, 3, 7, 6)).astype(np.float32)
    compare_forward_backward(make(nn), make(torch.nn), x)


def test_max_pool_ties_parity():
    """Integer-valued input with many ties: the gradient goes to the same pixel as in PyTorch."""
    x = np.random.default_rng(1).integers(0, 3, size=(2, 2, 6, 6)).astype(np.float32)
    compare_forward_backward(nn.MaxPool2d(3, stride=1, padding=1), torch.nn.MaxPool2d(3, stride=1, padding=1), x)
