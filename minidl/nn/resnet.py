"""Residual networks for 32x32 images: He et al. (2016), "Deep Residual Learning", Section 4.2 (CIFAR-10).

    conv3x3(in_channels -> w) - norm - relu
    stage 1: n BasicBlocks, w channels,   32x32
    stage 2: n BasicBlocks, 2w channels,  16x16  (first block has stride 2)
    stage 3: n BasicBlocks, 4w channels,  8x8    (first block has stride 2)
    global average pooling - Linear(4w -> num_classes)

depth = 6n + 2 (20, 32, 44, 56, 110) with w = 16 as in the paper. A BasicBlock computes

    y = relu(norm(conv3x3(relu(norm(conv3x3_stride(x))))) + shortcut(x))

where the shortcut is the identity, or, when the shape changes, a 1x1 convolution with stride plus a
norm layer ("option B" in the paper). Module names follow torchvision (conv1, bn1, layer1.0.downsample.0,
fc), so a PyTorch model built the same way shares its state_dict keys. Each norm-relu and norm-add-relu
runs as one fused op when the norm is a plain BatchNorm2d in training (bn_relu.py; the same numbers).
"""

from __future__ import annotations

from collections.abc import Callable

from minidl.nn.activation import ReLU
from minidl.nn.bn_relu import batch_norm_relu
from minidl.nn.container import Flatten, Identity, Sequential
from minidl.nn.conv import Conv2d
from minidl.nn.init import zeros_
from minidl.nn.linear import Linear
from minidl.nn.module import Module
from minidl.nn.norm import BatchNorm2d
from minidl.nn.pooling import AdaptiveAvgPool2d
from minidl.tensor import Tensor

Norm = Callable[[int], Module]


def _norm(norm: Norm | None, channels: int) -> Module:
    return Identity() if norm is None else norm(channels)


class BasicBlock(Module):
    """Two 3x3 convolutions with a residual connection; ``stride`` 2 halves the resolution."""

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: Norm | None = BatchNorm2d):
        super().__init__()
        bias = norm is None  # a norm layer's shift makes a conv bias redundant
        self.conv1 = Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=bias)
        self.bn1 = _norm(norm, planes)
        self.conv2 = Conv2d(planes, planes, 3, stride=1, padding=1, bias=bias)
        self.bn2 = _norm(norm, planes)
        self.downsample = None
        if stride != 1 or in_planes != planes:
            self.downsample = Sequential(Conv2d(in_planes, planes, 1, stride=stride, bias=bias), _norm(norm, planes))

    def forward(self, x: Tensor) -> Tensor:
        out = batch_norm_relu(self.conv1(x), self.bn1)  # relu(bn1(conv1(x))), fused (bn_relu.py)
        shortcut = x if self.downsample is None else self.downsample(x)
        return batch_norm_relu(self.conv2(out), self.bn2, shortcut)  # relu(bn2(conv2(out)) + shortcut)


class ResNet(Module):
    """ResNet for small images: a 3x3 stem, stages of BasicBlocks, global average pooling, a classifier."""

    def __init__(
        self,
        blocks_per_stage: list[int],
        num_classes: int = 10,
        in_channels: int = 3,
        width: int = 16,
        norm: Norm | None = BatchNorm2d,
        zero_init_residual: bool = False,
    ):
        super().__init__()
        self.conv1 = Conv2d(in_channels, width, 3, padding=1, bias=norm is None)
        self.bn1 = _norm(norm, width)
        self.relu = ReLU()
        planes = width
        for s, n in enumerate(blocks_per_stage):
            out_planes = width * 2**s
            blocks = [
                BasicBlock(planes if k == 0 else out_planes, out_planes, 2 if s > 0 and k == 0 else 1, norm)
                for k in range(n)
            ]
            setattr(self, f"layer{s + 1}", Sequential(*blocks))
            planes = out_planes
        self.num_stages = len(blocks_per_stage)
        self.avgpool = AdaptiveAvgPool2d(1)
        self.flatten = Flatten()
        self.fc = Linear(planes, num_classes)
        if zero_init_residual and norm is not None:
            # Each block then starts as the identity (Goyal et al. 2017), which helps large-batch training.
            for m in self.modules():
                if isinstance(m, BasicBlock) and getattr(m.bn2, "weight", None) is not None:
                    zeros_(m.bn2.weight)

    def units(self) -> list[tuple[str, Module]]:
        """The network as a chain of (name, unit): stem conv, bn, relu, each block, pool, flatten, fc. Running
        the units in order is ``forward``; model, pipeline and tensor parallelism cut this list, and a unit's
        parameter ``k`` is the ResNet's ``name.k``."""
        blocks = [
            (f"layer{s + 1}.{k}", b)
            for s in range(self.num_stages)
            for k, b in enumerate(getattr(self, f"layer{s + 1}"))
        ]
        names = ["conv1", "bn1", "relu", "*", "avgpool", "flatten", "fc"]
        return [u for n in names for u in (blocks if n == "*" else [(n, getattr(self, n))])]

    def forward(self, x: Tensor) -> Tensor:
        x = batch_norm_relu(self.conv1(x), self.bn1)  # self.relu(self.bn1(...)), fused
        for s in range(self.num_stages):
            x = getattr(self, f"layer{s + 1}")(x)
        return self.fc(self.flatten(self.avgpool(x)))


def resnet(
    depth: int = 20,
    num_classes: int = 10,
    in_channels: int = 3,
    width: int = 16,
    norm: Norm | None = BatchNorm2d,
    zero_init_residual: bool = False,
) -> ResNet:
    """ResNet-``depth`` for 32x32 inputs: 3 stages of (depth - 2) / 6 BasicBlocks, widths w, 2w, 4w.

    ``norm`` builds the normalization layer from a channel count (BatchNorm2d; a SyncBatchNorm for
    data-parallel training; None for no normalization, in which case convolutions get biases).
    """
    if depth < 8 or (depth - 2) % 6:
        raise ValueError(f"resnet: depth must be 6n + 2 with n >= 1 (8, 14, 20, 32, 44, 56, 110), got {depth}")
    if width < 1 or num_classes < 1 or in_channels < 1:
        raise ValueError(
            f"resnet: width, num_classes and in_channels must be >= 1, got {width}, {num_classes}, {in_channels}"
        )
    n = (depth - 2) // 6
    return ResNet([n, n, n], num_classes, in_channels, width, norm, zero_init_residual)
