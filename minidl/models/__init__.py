"""Complete models built from minidl.nn layers."""

from minidl.models.lm import PRESETS, LMConfig, LSTMLanguageModel

__all__ = ["LMConfig", "LSTMLanguageModel", "PRESETS"]
