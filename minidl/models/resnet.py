"""Training configurations of the ResNets (``nn.resnet``, ``nn.resnet_imagenet``) for ``python -m minidl.train cnn``."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any


@dataclass(frozen=True)
class CNNConfig:
    """A ResNet and its training schedule (SGD with momentum, warmup, cosine).

    ``model`` "resnet" is the CIFAR ResNet of ``depth`` = 6n + 2 and base width ``width``; "resnet18" ...
    "resnet152" is torchvision's (``depth`` and ``width`` then unused). ``image`` is the generated images'
    side in pixels (0: the image set's own, 32).
    """

    depth: int
    width: int
    batch_size: int  # per rank
    lr: float
    momentum: float
    weight_decay: float
    epochs: int
    warmup_epochs: float
    images: str = "default"  # minidl.data.images.IMAGE_CONFIGS entry for the generated set
    model: str = "resnet"
    image: int = 0

    def with_(self, **changes: Any) -> CNNConfig:
        return replace(self, **changes)

    def as_dict(self) -> dict:
        return asdict(self)


_DEMO = CNNConfig(depth=8, width=8, batch_size=32, lr=0.1, momentum=0.9, weight_decay=5e-4, epochs=3, warmup_epochs=0.2)
CNN_PRESETS: dict[str, CNNConfig] = {
    "demo": _DEMO,  # >= 95% per-label accuracy on the generated images in a few minutes on one core
    "resnet20": _DEMO.with_(depth=20, width=16, batch_size=64, weight_decay=1e-4, epochs=10, warmup_epochs=1.0),  # He
    "quick": _DEMO.with_(batch_size=16, epochs=5, images="quick"),  # seconds: tests and the tutorials' --quick
    # torchvision's ResNets (--model resnet50 picks these; the blocks start as the identity, Goyal et al. 2017):
    # 64 px images, batch 32; lr 0.02 (0.1 diverged at batch 16)
    "imagenet": _DEMO.with_(model="resnet50", image=64, lr=0.02, weight_decay=1e-4, epochs=2, warmup_epochs=0.5),
    "imagenet-quick": _DEMO.with_(model="resnet50", image=32, batch_size=16, lr=0.02, epochs=2, images="tiny"),
}
IMAGENET_MODELS = ("resnet18", "resnet34", "resnet50", "resnet101", "resnet152")
