"""PyTorch parity helpers for the layer tests, and a PyTorch re-implementation of minidl.nn.resnet
(same module names, so state_dicts transfer; also the PyTorch side of benchmarks/cnn.py).

Import only where torch is installed (tests do ``pytest.importorskip("torch")`` first).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

import minidl


def load_into_torch(theirs: nn.Module, ours) -> None:
    """Copy our state_dict into the torch module (strict: names and shapes must agree)."""
    theirs.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()}, strict=True)


def load_into_minidl(ours, theirs: nn.Module) -> None:
    """Copy torch's state_dict into our module (strict)."""
    ours.load_state_dict({k: v.detach().numpy() for k, v in theirs.state_dict().items()}, strict=True)


def assert_state_dicts_equal(ours, theirs: nn.Module, rtol: float = 1e-6, atol: float = 1e-6) -> None:
    a, b = ours.state_dict(), theirs.state_dict()
    assert list(a) == list(b), f"state_dict keys differ: {list(a)} vs {list(b)}"
    for k in a:
        assert a[k].shape == tuple(b[k].shape), k
        np.testing.assert_allclose(a[k], b[k].detach().numpy(), rtol=rtol, atol=atol, err_msg=k)


def assert_close(ours: np.ndarray, ref: np.ndarray, rtol: float, atol: float, what: str) -> None:
    """allclose with ``atol`` relative to the reference's largest magnitude (gradients of deep nets are not O(1))."""
    np.testing.assert_allclose(
        ours, ref, rtol=rtol, atol=atol * max(1.0, float(np.abs(ref).max(initial=0))), err_msg=what
    )


def compare_forward_backward(
    ours,
    theirs: nn.Module,
    x: np.ndarray,
    seed: int = 0,
    rtol: float = 1e-5,
    atol: float = 1e-6,
    input_grad: bool = True,
) -> None:
    """Same input and upstream gradient through both: outputs, input gradient and every parameter gradient agree.

    ``x`` float arrays get a gradient; integer arrays (embedding indices) are passed as they are.
    """
    float_input = x.dtype.kind == "f" and input_grad
    xm = minidl.tensor(x, requires_grad=float_input) if x.dtype.kind == "f" else x
    xt = torch.tensor(x, requires_grad=float_input)
    ym, yt = ours(xm), theirs(xt)
    assert_close(ym.data, yt.detach().numpy(), rtol, atol, "forward")
    g = np.random.default_rng(seed).standard_normal(ym.shape).astype(ym.dtype)
    ym.backward(g)
    yt.backward(torch.from_numpy(g))
    if float_input:
        assert_close(xm.grad, xt.grad.numpy(), rtol, atol, "input grad")
    tp = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert_close(p.grad, tp[name].grad.numpy(), rtol, atol, f"grad of {name}")


class TorchBasicBlock(nn.Module):
    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        self.conv1 = nn.Conv2d(in_planes, planes, 3, stride, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, 1, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, planes, 1, stride, bias=False), nn.BatchNorm2d(planes))

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + (x if self.downsample is None else self.downsample(x)))


class TorchResNet(nn.Module):
    def __init__(self, depth: int = 20, num_classes: int = 10, in_channels: int = 3, width: int = 16):
        super().__init__()
        n = (depth - 2) // 6
        self.conv1 = nn.Conv2d(in_channels, width, 3, 1, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        planes = width
        for s in range(3):
            out = width * 2**s
            blocks = [TorchBasicBlock(planes if k == 0 else out, out, 2 if s > 0 and k == 0 else 1) for k in range(n)]
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
            planes = out
        self.fc = nn.Linear(planes, num_classes)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = self.layer3(self.layer2(self.layer1(x)))
        return self.fc(x.mean(dim=(2, 3)))


class TorchBottleneck(nn.Module):
    """torchvision's Bottleneck (v1.5: the stride on the 3x3), written from its documented layout."""

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int):
        super().__init__()
        out = planes * self.expansion
        self.conv1 = nn.Conv2d(in_planes, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, out, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out)
        self.downsample = None
        if stride != 1 or in_planes != out:
            self.downsample = nn.Sequential(nn.Conv2d(in_planes, out, 1, stride, bias=False), nn.BatchNorm2d(out))

    def forward(self, x):
        y = torch.relu(self.bn1(self.conv1(x)))
        y = torch.relu(self.bn2(self.conv2(y)))
        return torch.relu(self.bn3(self.conv3(y)) + (x if self.downsample is None else self.downsample(x)))


TORCH_IMAGENET_DEPTHS = {
    18: (TorchBasicBlock, [2, 2, 2, 2]),
    34: (TorchBasicBlock, [3, 4, 6, 3]),
    50: (TorchBottleneck, [3, 4, 6, 3]),
    101: (TorchBottleneck, [3, 4, 23, 3]),
    152: (TorchBottleneck, [3, 8, 36, 3]),
}


class TorchImageNetResNet(nn.Module):
    """torchvision.models.resnetN's module tree (torchvision does not install beside this torch): 7x7/2 stem,
    3x3/2 max pooling, four stages of 64..512 planes, average pooling, fc."""

    def __init__(self, depth: int = 50, num_classes: int = 1000):
        super().__init__()
        block, stages = TORCH_IMAGENET_DEPTHS[depth]
        expansion = getattr(block, "expansion", 1)
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU()
        self.maxpool = nn.MaxPool2d(3, 2, 1)
        planes = 64
        for s, n in enumerate(stages):
            width = 64 * 2**s
            blocks = [
                block(planes if k == 0 else width * expansion, width, 2 if s > 0 and k == 0 else 1) for k in range(n)
            ]
            setattr(self, f"layer{s + 1}", nn.Sequential(*blocks))
            planes = width * expansion
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(planes, num_classes)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))
