"""Keep a training step's freed arrays in the process's heap, so the next step does not page-fault them back in.

NumPy takes every array from malloc. glibc serves a block of at least M_MMAP_THRESHOLD bytes with a
fresh mmap and unmaps it on free; it starts at 128 KiB and rises to the size of the largest such block
freed so far (up to 32 MiB), and it returns the heap's free top to the system once that exceeds
M_TRIM_THRESHOLD (twice the mmap threshold). A training step allocates and frees the same arrays every
step (activations, gradients, the convolution's padded copies: ~100 MB in the ResNet-20 step at batch
64), so whether they come back as heap memory already mapped, or as new pages the kernel must fault in
and zero, depends on the history of earlier allocations: in the same ResNet-20 benchmark, one process
ran 2-3 page faults a step and another 32,000 (128 MB, about 70 ms of system time and 20% of the step),
with no change to the code (measured). Fixing both thresholds makes every step like the best one:

    M_MMAP_THRESHOLD = 32 MiB   (glibc's largest: blocks below it come from the heap)
    M_TRIM_THRESHOLD = 1 GiB    (freed memory stays mapped for the next step)

The price is that up to 1 GiB freed stays in the process (its peak RSS is unchanged). ``import minidl``
calls ``tune_malloc()``; it does nothing off glibc, when the user set any MALLOC_* threshold variable
(which glibc reads at start-up) or a glibc.malloc tunable, or when MINIDL_MALLOC=default.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # mallopt parameter numbers, from glibc's <malloc.h>
MMAP_THRESHOLD = 32 << 20
TRIM_THRESHOLD = 1 << 30
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_")

_tuned = False


def glibc() -> bool:
    """Whether this process runs on GNU libc (whose mallopt takes the parameters above)."""
    try:
        return sys.platform.startswith("linux") and os.confstr("CS_GNU_LIBC_VERSION") is not None
    except (ValueError, OSError):
        return False


def tune_malloc() -> bool:
    """Fix glibc's mmap and trim thresholds (module docstring); returns whether they are now set by us."""
    global _tuned
    if _tuned:
        return True
    if os.environ.get("MINIDL_MALLOC", "") == "default" or any(v in os.environ for v in USER_VARIABLES):
        return False
    if "glibc.malloc." in os.environ.get("GLIBC_TUNABLES", ""):
        return False
    if not glibc():
        return False
    mallopt = ctypes.CDLL(None).mallopt  # this process's C library
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    _tuned = bool(mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_THRESHOLD))
    return _tuned


def malloc_tuned() -> bool:
    """Whether ``tune_malloc`` has set the thresholds in this process."""
    return _tuned
