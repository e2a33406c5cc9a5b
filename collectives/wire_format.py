"""The wire format of the collectives here: how an array travels in a point-to-point message.

A plain NumPy array travels as itself (mpi4py sends its buffer). A structured array, such as the (value, index)
pairs of maxloc and minloc (collectives/loc.py), travels as its raw bytes: mpi4py has no MPI datatype for a NumPy
structured dtype, and the bytes are the same on every rank of one machine type. Every algorithm asks
``wire(comm, dtype)`` for the communicator to send such an array on.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from collectives.communicators import CommView


def _raw(buf: Any) -> Any:
    """A structured array as its bytes (a view); anything else unchanged."""
    if isinstance(buf, np.ndarray) and buf.dtype.names is not None:
        return buf.reshape(-1).view(np.uint8)
    return buf


class BytesComm(CommView):
    """``comm`` whose structured-array messages travel as bytes; the point-to-point subset only."""

    def _buf(self, buf: Any) -> Any:
        return _raw(buf)


def wire(comm: Any, dtype: np.dtype) -> Any:
    """The communicator an algorithm should use for arrays of ``dtype``: BytesComm for pairs."""
    return BytesComm(comm) if dtype.names is not None else comm
