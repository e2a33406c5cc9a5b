"""resnet(depth): structure, a float64 gradcheck of a tiny one, and PyTorch parity of ResNet-20 (train and eval)."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn


def test_resnet20_structure():
    m = nn.resnet(20, num_classes=10)
    assert sum(p.size for p in m.parameters()) == 272_474  # ResNet-20 with 1x1 projection shortcuts
    assert [len(m.layer1), len(m.layer2), len(m.layer3)] == [3, 3, 3]
    assert m.layer2[0].downsample is not None and m.layer2[1].downsample is None and m.layer1[0].downsample is None
    assert m.layer3[0].conv1.stride == (2, 2) and m.fc.weight.shape == (10, 64)
    y = m(minidl.zeros(2, 3, 32, 32))
    assert y.shape == (2, 10)
    assert nn.resnet(8, num_classes=3, in_channels=1, width=4)(minidl.zeros(2, 1, 16, 16)).shape == (2, 3)
    with pytest.raises(ValueError, match="6n \\+ 2"):
        nn.resnet(21)


def test_resnet_norm_choices():
    plain = nn.resnet(8, width=4, norm=None)
    assert not any(isinstance(mod, nn.BatchNorm2d) for mod in plain.modules())
    assert plain.conv1.bias is not None  # no norm layer: convolutions get biases
    z = nn.resnet(8, width=4, zero_init_residual=True)
    assert np.all(z.layer1[0].bn2.weight.data == 0)


def test_tiny_resnet_gradcheck(rng):
    minidl.set_default_dtype(np.float64)
    minidl.manual_seed(0)
    m = nn.resnet(8, num_classes=3, in_channels=2, width=2)
    x = rng.standard_normal((3, 2, 6, 6))
    assert minidl.gradcheck(lambda x: m(x), [x], max_elementwise=300)
    w = m.layer2[0].conv1.weight

    def fn(w_new):
        m.layer2[0].conv1.weight = w_new
        return F.cross_entropy(m(minidl.tensor(x)), np.array([0, 2, 1]))

    assert minidl.gradcheck(fn, [w.data])


def test_resnet20_parity_with_torch(rng):
    torch = pytest.importorskip("torch")
    from torch_reference import TorchResNet, assert_state_dicts_equal, compare_forward_backward, load_into_torch

    minidl.manual_seed(0)
    ours, theirs = nn.resnet(20, num_classes=10), TorchResNet(20, num_classes=10)
    load_into_torch(theirs, ours)
    x = rng.standard_normal((4, 3, 32, 32)).astype(np.float32)
    compare_forward_backward(ours, theirs, x, rtol=1e-3, atol=1e-4)  # train mode: batch statistics
    assert_state_dicts_equal(ours, theirs, rtol=1e-5, atol=1e-6)  # running statistics updated alike
    ours.eval()
    theirs.eval()
    with torch.no_grad():
        np.testing.assert_allclose(
            ours(minidl.tensor(x)).data, theirs(torch.from_numpy(x)).numpy(), rtol=1e-3, atol=1e-4
        )
