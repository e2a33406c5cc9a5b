"""Optimizers, learning-rate schedules and gradient clipping (PyTorch's names and update rules)."""

from minidl.optim import lr_scheduler
from minidl.optim.adam import Adam, AdamW
from minidl.optim.clip_grad import clip_grad_norm
from minidl.optim.lamb import LAMB
from minidl.optim.lars import LARS, exclude_bias_and_norm
from minidl.optim.optimizer import Optimizer
from minidl.optim.sgd import SGD

__all__ = [
    "SGD",
    "LARS",
    "LAMB",
    "Adam",
    "AdamW",
    "Optimizer",
    "clip_grad_norm",
    "exclude_bias_and_norm",
    "lr_scheduler",
]
