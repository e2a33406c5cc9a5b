"""torchvision's ImageNet ResNets by name: ``resnet18()`` ... ``resnet152()`` (the model is ``nn.resnet``'s page).

    >>> model = minidl.models.resnet50()          # 25,557,032 parameters, torchvision's state_dict keys
    >>> model(minidl.zeros(2, 3, 224, 224)).shape  # any size from 32 pixels up
    (2, 1000)

Each takes ``num_classes`` (1000), ``in_channels`` (3), ``norm`` (BatchNorm2d; a SyncBatchNorm for
data-parallel training) and ``zero_init_residual`` (False), as ``nn.resnet_imagenet`` does.
"""

from __future__ import annotations

from typing import Any

from minidl.nn.resnet import ResNet, resnet_imagenet


def resnet18(**kwargs: Any) -> ResNet:
    """ResNet-18: BasicBlocks in stages of [2, 2, 2, 2], 11.7 M parameters."""
    return resnet_imagenet(18, **kwargs)


def resnet34(**kwargs: Any) -> ResNet:
    """ResNet-34: BasicBlocks in stages of [3, 4, 6, 3], 21.8 M parameters."""
    return resnet_imagenet(34, **kwargs)


def resnet50(**kwargs: Any) -> ResNet:
    """ResNet-50 (v1.5): Bottlenecks in stages of [3, 4, 6, 3], 25.6 M parameters."""
    return resnet_imagenet(50, **kwargs)


def resnet101(**kwargs: Any) -> ResNet:
    """ResNet-101 (v1.5): Bottlenecks in stages of [3, 4, 23, 3], 44.5 M parameters."""
    return resnet_imagenet(101, **kwargs)


def resnet152(**kwargs: Any) -> ResNet:
    """ResNet-152 (v1.5): Bottlenecks in stages of [3, 8, 36, 3], 60.2 M parameters."""
    return resnet_imagenet(152, **kwargs)
