"""Complete models built from minidl.nn layers."""

from minidl.models.imagenet import resnet18, resnet34, resnet50, resnet101, resnet152
from minidl.models.lm import PRESETS, LMConfig, LSTMLanguageModel

__all__ = ["LMConfig", "LSTMLanguageModel", "PRESETS", "resnet18", "resnet34", "resnet50", "resnet101", "resnet152"]
