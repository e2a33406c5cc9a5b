"""Where the bytes go: one communicator wrapper that counts what this rank sends, and to whom.

``CountingComm(comm)`` forwards every call to the wrapped ``inner`` communicator unchanged and counts
what this rank sends (``Send``, ``Isend``, ``Sendrecv``): ``messages_sent``, ``bytes_sent``, and
``sent_to[j]``, the bytes sent to rank j. Collectives and the differentiable send/recv run on it as
on the original; headers and agreement checks count too, so the numbers are what went on the wire.
Model, tensor and pipeline parallelism measure their bytes per step with it, and the comparison of
the data-parallel schemes (``benchmarks/compare.py``) their traffic matrices.

What a rank *receives* is what the others sent to it, so one exchange of the per-rank rows at the
end gives the whole traffic matrix ``M[i, j]`` = bytes rank i sent to rank j, hence bytes sent (row
sums) and received (column sums) by every rank, exactly, without watching receives (an ``Irecv``
knows its size only once it completes). The collectives of ``collectives`` are point-to-point calls,
so they are counted; an MPI library collective (``Allreduce`` with algorithm "mpi") is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _nbytes(buf: Any) -> int:
    if isinstance(buf, (list, tuple)):  # mpi4py's [data, MPI.DOUBLE] / [data, count, type] forms
        buf = buf[0]
    return memoryview(buf).nbytes


class CountingComm:
    """A communicator that counts what this rank sends, then passes each call on.

    ``messages_sent``, ``bytes_sent`` and ``sent_to[j]`` (bytes to rank j) since construction or
    ``reset()``; everything else (``Recv``, ``Barrier``, ``Get_rank`` ...) goes to ``inner``.
    """

    def __init__(self, comm: Any):
        self.inner = comm
        self.messages_sent = 0
        self.bytes_sent = 0
        self.sent_to = np.zeros(comm.Get_size(), dtype=np.int64)

    def reset(self) -> tuple[int, int]:
        """Start counting again; returns the (messages, bytes) counted until now."""
        counted = (self.messages_sent, self.bytes_sent)
        self.messages_sent = self.bytes_sent = 0
        self.sent_to[:] = 0
        return counted

    def _count(self, buf: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        nbytes = _nbytes(buf)
        self.messages_sent += 1
        self.bytes_sent += nbytes
        self.sent_to[args[0] if args else kwargs["dest"]] += nbytes

    def Send(self, buf: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N802 - mpi4py's names
        self._count(buf, args, kwargs)
        self.inner.Send(buf, *args, **kwargs)

    def Isend(self, buf: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N802
        self._count(buf, args, kwargs)
        return self.inner.Isend(buf, *args, **kwargs)

    def Sendrecv(self, sendbuf: Any, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        self._count(sendbuf, args, kwargs)
        self.inner.Sendrecv(sendbuf, *args, **kwargs)

    def traffic_matrix(self) -> np.ndarray:
        """``M[i, j]`` = bytes rank i sent to rank j, on every rank (one allreduce on the wrapped
        communicator, itself not counted). Call it on every rank at the same point."""
        from minidl.distributed.data_parallel.allreduce import allreduce

        p, r = self.inner.Get_size(), self.inner.Get_rank()
        rows = np.zeros((p, p), dtype=np.float64)  # float64 is exact for byte counts below 2**53
        rows[r] = self.sent_to
        return allreduce(self.inner, rows.reshape(-1), "ring", "sum").reshape(p, p).astype(np.int64)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def __repr__(self) -> str:
        return f"CountingComm({self.inner!r}, messages_sent={self.messages_sent}, bytes_sent={self.bytes_sent})"


TrafficComm = CountingComm  # the name the parameter-server comparison used; the same class


def sent_and_received(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes sent (row sums) and received (column sums) by each rank of a traffic matrix."""
    return matrix.sum(axis=1), matrix.sum(axis=0)


__all__ = ["CountingComm", "TrafficComm", "sent_and_received"]
