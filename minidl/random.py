"""The library's random number generator, reseedable with ``minidl.manual_seed``.

Everything random in minidl (parameter initialization, dropout masks, shuffling) draws from
``default_generator()`` unless given its own ``np.random.Generator``, so one call to
``manual_seed(s)`` makes a whole run reproducible, as ``torch.manual_seed`` does.

The generator is per thread: simulated MPI ranks (``collectives.simulate``) are threads of one
process, and each rank seeds and draws from its own stream, as separate processes would. A thread
that never calls ``manual_seed`` gets an unseeded generator of its own.
"""

from __future__ import annotations

import threading

import numpy as np


class _ThreadGenerator(threading.local):
    def __init__(self) -> None:
        self.generator: np.random.Generator = np.random.default_rng()


_state = _ThreadGenerator()


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the library's generator (a fresh PCG64 stream seeded with ``seed``) and return it."""
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative integer, got {seed!r}")
    _state.generator = np.random.default_rng(int(seed))
    return _state.generator


def default_generator() -> np.random.Generator:
    """The generator used when a function is not given its own ``rng``."""
    return _state.generator
