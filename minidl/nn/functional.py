"""Functional forms of layers and losses (``import minidl.nn.functional as F``)."""

from __future__ import annotations
