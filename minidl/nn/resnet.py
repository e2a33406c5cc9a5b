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

The ImageNet ResNets (He et al. 2016, Table 1) as torchvision builds them, ``resnet18`` ... ``resnet152``:

    conv7x7/2(3 -> 64) - norm - relu - maxpool3x3/2           224 -> 56
    layer1..layer4: blocks of widths 64, 128, 256, 512 (x4 out for a Bottleneck), strides 1, 2, 2, 2
    global average pooling - Linear(512 * expansion -> 1000)

18 and 34 use BasicBlocks, 50, 101 and 152 Bottlenecks (1x1 reduce, 3x3, 1x1 expand by 4). The stride
of a Bottleneck sits on its 3x3 convolution, not on the first 1x1 as in the paper ("ResNet v1.5", as
torchvision does). Parameter names and shapes are torchvision's (layer3.5.conv2.weight,
layer2.0.downsample.0.weight, fc.bias), so a state dict moves across by name.
"""

from __future__ import annotations

from collections.abc import Callable

from minidl.nn.activation import ReLU
from minidl.nn.bn_relu import batch_norm_relu
from minidl.nn.container import Flatten, Identity, Sequential
from minidl.nn.conv import Conv2d
from minidl.nn.init import kaiming_normal_, zeros_
from minidl.nn.linear import Linear
from minidl.nn.module import Module
from minidl.nn.norm import BatchNorm2d
from minidl.nn.pooling import AdaptiveAvgPool2d, MaxPool2d
from minidl.tensor import Tensor

Norm = Callable[[int], Module]


def _norm(norm: Norm | None, channels: int) -> Module:
    return Identity() if norm is None else norm(channels)


def _shortcut(in_planes: int, out_planes: int, stride: int, norm: Norm | None) -> Sequential | None:
    """The identity (None) where the shape stays, else a 1x1 projection with stride and a norm layer."""
    if stride == 1 and in_planes == out_planes:
        return None
    return Sequential(Conv2d(in_planes, out_planes, 1, stride=stride, bias=norm is None), _norm(norm, out_planes))


class BasicBlock(Module):
    """Two 3x3 convolutions with a residual connection; ``stride`` 2 halves the resolution."""

    expansion = 1  # output channels = planes * expansion

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: Norm | None = BatchNorm2d):
        super().__init__()
        bias = norm is None  # a norm layer's shift makes a conv bias redundant
        self.conv1 = Conv2d(in_planes, planes, 3, stride=stride, padding=1, bias=bias)
        self.bn1 = _norm(norm, planes)
        self.conv2 = Conv2d(planes, planes, 3, stride=1, padding=1, bias=bias)
        self.bn2 = _norm(norm, planes)
        self.downsample = _shortcut(in_planes, planes, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        out = batch_norm_relu(self.conv1(x), self.bn1)  # relu(bn1(conv1(x))), fused (bn_relu.py)
        shortcut = x if self.downsample is None else self.downsample(x)
        return batch_norm_relu(self.conv2(out), self.bn2, shortcut)  # relu(bn2(conv2(out)) + shortcut)


class Bottleneck(Module):
    """1x1 reduce to ``planes``, 3x3 (carrying the stride, v1.5), 1x1 expand to 4 * planes, plus the shortcut:

    y = relu(bn3(conv3(relu(bn2(conv2_stride(relu(bn1(conv1(x)))))))) + shortcut(x))
    """

    expansion = 4

    def __init__(self, in_planes: int, planes: int, stride: int = 1, norm: Norm | None = BatchNorm2d):
        super().__init__()
        bias, out_planes = norm is None, planes * self.expansion
        self.conv1 = Conv2d(in_planes, planes, 1, bias=bias)
        self.bn1 = _norm(norm, planes)
        self.conv2 = Conv2d(planes, planes, 3, stride=stride, padding=1, bias=bias)
        self.bn2 = _norm(norm, planes)
        self.conv3 = Conv2d(planes, out_planes, 1, bias=bias)
        self.bn3 = _norm(norm, out_planes)
        self.downsample = _shortcut(in_planes, out_planes, stride, norm)

    def forward(self, x: Tensor) -> Tensor:
        out = batch_norm_relu(self.conv1(x), self.bn1)
        out = batch_norm_relu(self.conv2(out), self.bn2)
        shortcut = x if self.downsample is None else self.downsample(x)
        return batch_norm_relu(self.conv3(out), self.bn3, shortcut)


class ResNet(Module):
    """A ResNet: a stem, stages of blocks (the first of each stage after the first with stride 2), global average
    pooling and a classifier.

    The CIFAR stem (default) is one 3x3 convolution; ``imagenet_stem`` makes it torchvision's 7x7 stride-2
    convolution and 3x3 stride-2 max pooling. Stage s has ``width * 2**s`` planes of ``block``.
    """

    def __init__(
        self,
        blocks_per_stage: list[int],
        num_classes: int = 10,
        in_channels: int = 3,
        width: int = 16,
        norm: Norm | None = BatchNorm2d,
        zero_init_residual: bool = False,
        *,
        block: type[BasicBlock | Bottleneck] = BasicBlock,
        imagenet_stem: bool = False,
    ):
        super().__init__()
        if imagenet_stem:
            self.conv1 = Conv2d(in_channels, width, 7, stride=2, padding=3, bias=norm is None)
        else:
            self.conv1 = Conv2d(in_channels, width, 3, padding=1, bias=norm is None)
        self.bn1 = _norm(norm, width)
        self.relu = ReLU()
        self.maxpool = MaxPool2d(3, stride=2, padding=1) if imagenet_stem else None
        planes = width
        for s, n in enumerate(blocks_per_stage):
            stage_planes = width * 2**s
            blocks = [
                block(
                    planes if k == 0 else stage_planes * block.expansion,
                    stage_planes,
                    2 if s > 0 and k == 0 else 1,
                    norm,
                )
                for k in range(n)
            ]
            setattr(self, f"layer{s + 1}", Sequential(*blocks))
            planes = stage_planes * block.expansion
        self.num_stages = len(blocks_per_stage)
        self.avgpool = AdaptiveAvgPool2d(1)
        self.flatten = Flatten()
        self.fc = Linear(planes, num_classes)
        if zero_init_residual and norm is not None:
            # Each block then starts as the identity (Goyal et al. 2017), which helps large-batch training.
            for m in self.modules():
                last_bn = m.bn3 if isinstance(m, Bottleneck) else m.bn2 if isinstance(m, BasicBlock) else None
                weight = getattr(last_bn, "weight", None)
                if weight is not None:
                    zeros_(weight)

    def units(self) -> list[tuple[str, Module]]:
        """The network as a chain of (name, unit): stem conv, bn, relu, [maxpool,] each block, pool, flatten, fc.
        Running the units in order is ``forward``; model, pipeline and tensor parallelism cut this list, and a
        unit's parameter ``k`` is the ResNet's ``name.k``."""
        blocks = [
            (f"layer{s + 1}.{k}", b)
            for s in range(self.num_stages)
            for k, b in enumerate(getattr(self, f"layer{s + 1}"))
        ]
        names = ["conv1", "bn1", "relu"] + (["maxpool"] if self.maxpool is not None else [])
        names += ["*", "avgpool", "flatten", "fc"]
        return [u for n in names for u in (blocks if n == "*" else [(n, getattr(self, n))])]

    def forward(self, x: Tensor) -> Tensor:
        x = batch_norm_relu(self.conv1(x), self.bn1)  # self.relu(self.bn1(...)), fused
        if self.maxpool is not None:
            x = self.maxpool(x)
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


IMAGENET_DEPTHS: dict[int, tuple[type[BasicBlock | Bottleneck], list[int]]] = {
    18: (BasicBlock, [2, 2, 2, 2]),
    34: (BasicBlock, [3, 4, 6, 3]),
    50: (Bottleneck, [3, 4, 6, 3]),
    101: (Bottleneck, [3, 4, 23, 3]),
    152: (Bottleneck, [3, 8, 36, 3]),
}


def resnet_imagenet(
    depth: int = 50,
    num_classes: int = 1000,
    in_channels: int = 3,
    norm: Norm | None = BatchNorm2d,
    zero_init_residual: bool = False,
) -> ResNet:
    """torchvision's ResNet-``depth`` (18, 34, 50, 101, 152) for images of 32 pixels and up ([N, C, H, W]).

    Initialized as torchvision does: convolutions He-normal with fan_out (He et al. 2015), norm layers at
    weight 1 and bias 0, fc PyTorch's default; ``zero_init_residual`` zeroes each block's last norm weight.
    """
    if depth not in IMAGENET_DEPTHS:
        raise ValueError(f"resnet_imagenet: depth must be one of {sorted(IMAGENET_DEPTHS)}, got {depth}")
    if num_classes < 1 or in_channels < 1:
        raise ValueError(f"resnet_imagenet: num_classes and in_channels must be >= 1, got {num_classes}, {in_channels}")
    block, stages = IMAGENET_DEPTHS[depth]
    model = ResNet(stages, num_classes, in_channels, 64, norm, zero_init_residual, block=block, imagenet_stem=True)
    for m in model.modules():
        if isinstance(m, Conv2d):
            kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model
