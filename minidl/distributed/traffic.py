"""Where the bytes go: per-destination send counts, to compare schemes by communication volume.

``TrafficComm(comm)`` is ``p2p.CountingComm`` (it forwards every call and counts what this rank
sends) that also adds each message's size to ``sent_to[dest]``. What a rank *receives* is what the
others sent to it, so one exchange of the per-rank rows at the end gives the whole traffic matrix
``M[i, j]`` = bytes rank i sent to rank j, hence bytes sent (row sums) and received (column sums)
by every rank, exactly, without watching receives (an ``Irecv`` knows its size only once it
completes). The collectives of ``collectives`` are point-to-point calls, so they are counted;
an MPI library collective (``Allreduce`` with algorithm "mpi") is not.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.p2p import CountingComm, _nbytes


class TrafficComm(CountingComm):
    """``CountingComm`` plus ``sent_to[j]``: bytes this rank sent to rank j since construction or ``reset()``."""

    def __init__(self, comm: Any):
        super().__init__(comm)
        self.sent_to = np.zeros(comm.Get_size(), dtype=np.int64)

    def reset(self) -> tuple[int, int]:
        self.sent_to[:] = 0
        return super().reset()

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:  # noqa: N802 - mpi4py's names
        self.sent_to[dest] += _nbytes(buf)
        super().Send(buf, dest, tag)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Any:  # noqa: N802
        self.sent_to[dest] += _nbytes(buf)
        return super().Isend(buf, dest, tag)

    def Sendrecv(self, sendbuf: Any, dest: int, *args: Any, **kwargs: Any) -> None:  # noqa: N802
        self.sent_to[dest] += _nbytes(sendbuf)
        super().Sendrecv(sendbuf, dest, *args, **kwargs)

    def traffic_matrix(self) -> np.ndarray:
        """``M[i, j]`` = bytes rank i sent to rank j, on every rank (one allreduce on the wrapped
        communicator, itself not counted). Call it on every rank at the same point."""
        from minidl.distributed.allreduce import allreduce

        p, r = self.inner.Get_size(), self.inner.Get_rank()
        rows = np.zeros((p, p), dtype=np.float64)  # float64 is exact for byte counts below 2**53
        rows[r] = self.sent_to
        return allreduce(self.inner, rows.reshape(-1), "ring", "sum").reshape(p, p).astype(np.int64)


def sent_and_received(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bytes sent (row sums) and received (column sums) by each rank of a traffic matrix."""
    return matrix.sum(axis=1), matrix.sum(axis=0)


__all__ = ["TrafficComm", "sent_and_received"]
