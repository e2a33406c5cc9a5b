"""The library's random number generator, reseedable with ``minidl.manual_seed``.

Everything random in minidl (parameter initialization, dropout masks, shuffling) draws from
``default_generator()`` unless given its own ``np.random.Generator``, so one call to
``manual_seed(s)`` makes a whole run reproducible, as ``torch.manual_seed`` does.
"""

from __future__ import annotations

import numpy as np

_generator: np.random.Generator = np.random.default_rng()


def manual_seed(seed: int) -> np.random.Generator:
    """Reseed the library's generator (a fresh PCG64 stream seeded with ``seed``) and return it."""
    global _generator
    if not isinstance(seed, int | np.integer) or seed < 0:
        raise ValueError(f"manual_seed: seed must be a non-negative integer, got {seed!r}")
    _generator = np.random.default_rng(int(seed))
    return _generator


def default_generator() -> np.random.Generator:
    """The generator used when a function is not given its own ``rng``."""
    return _generator
