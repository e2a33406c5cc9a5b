"""Layers, losses and the Module container."""

from minidl.nn.module import Module, Parameter

__all__ = ["Module", "Parameter"]
