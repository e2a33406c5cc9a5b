"""What the communicators written here share: the two ways they get ``Sendrecv``.

The algorithms use mpi4py's point-to-point subset (Send, Recv, Isend, Irecv, Sendrecv). A communicator written
in this repository is one of two kinds, and each kind gets Sendrecv from one class here:

- ``NonblockingSendrecv``: a communicator that implements Isend and Irecv itself (the in-process ranks, the
  watchdog and timeout wrappers) gets Sendrecv as MPI defines it: the receive posted, then the send, then both
  completed (MPI_Sendrecv's definition), so two ranks that exchange with each other never deadlock.
  It completes the pair with ``_complete(recv, send, status)``: by default ``recv.Wait(status)`` then
  ``send.Wait()``; a communicator that polls against a deadline overrides it.
- ``CommView``: a communicator seen through a translation, of its ranks (``_peer``: a group's rank to the parent's)
  or of its buffers (``_buf``: structured pairs as bytes); each call goes on to the wrapped ``comm`` as the same
  call, so a traced Sendrecv stays one Sendrecv.

The tracer (virtual_time/trace.py) records a Sendrecv as one row, and the counting wrapper
(minidl/distributed/counting.py) counts what passes through: each keeps a Sendrecv of its own.
"""

from __future__ import annotations

from typing import Any

ANY_SOURCE, ANY_TAG = -2, -1  # MPICH's values (mpi4py's MPI.ANY_SOURCE and MPI.ANY_TAG there)


class NonblockingSendrecv:
    """Sendrecv from the subclass's ``Irecv`` and ``Isend`` (each taking ``_call``, the name its errors give)."""

    _any_source: Any = ANY_SOURCE  # what source=None and recvtag=None mean (a wrapper of MPI sets MPI's values)
    _any_tag: Any = ANY_TAG

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int | None = None,
                 recvtag: int | None = None, status: Any = None) -> None:  # fmt: skip
        if recvbuf is None:
            raise TypeError("Sendrecv: recvbuf is required (buffer-based calls only)")
        source = self._any_source if source is None else source
        recvtag = self._any_tag if recvtag is None else recvtag
        recv = self.Irecv(recvbuf, source, recvtag, _call="Sendrecv")  # type: ignore[attr-defined]
        send = self.Isend(sendbuf, dest, sendtag, _call="Sendrecv")  # type: ignore[attr-defined]
        self._complete(recv, send, status)

    def _complete(self, recv: Any, send: Any, status: Any) -> None:
        """Wait for both requests; ``status`` (if given) describes the receive."""
        recv.Wait(status)
        send.Wait()


class CommView:
    """``comm`` seen through ``_peer`` (ranks) and ``_buf`` (buffers); the point-to-point subset only."""

    def __init__(self, comm: Any):
        self.comm = comm

    def _peer(self, rank: int) -> int:
        return rank

    def _buf(self, buf: Any) -> Any:
        return buf

    def Get_rank(self) -> int:
        return self.comm.Get_rank()

    def Get_size(self) -> int:
        return self.comm.Get_size()

    def Send(self, buf: Any, dest: int, tag: int = 0) -> None:
        self.comm.Send(self._buf(buf), self._peer(dest), tag)

    def Recv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG, status: Any = None) -> None:
        args = (self._buf(buf), self._peer(source), tag)
        self.comm.Recv(*args) if status is None else self.comm.Recv(*args, status)

    def Isend(self, buf: Any, dest: int, tag: int = 0) -> Any:
        return self.comm.Isend(self._buf(buf), self._peer(dest), tag)

    def Irecv(self, buf: Any, source: int = ANY_SOURCE, tag: int = ANY_TAG) -> Any:
        return self.comm.Irecv(self._buf(buf), self._peer(source), tag)

    def Sendrecv(self, sendbuf: Any, dest: int, sendtag: int = 0, recvbuf: Any = None, source: int = ANY_SOURCE,
                 recvtag: int = ANY_TAG) -> None:  # fmt: skip
        peers = self._peer(dest), self._peer(source)
        self.comm.Sendrecv(self._buf(sendbuf), peers[0], sendtag, self._buf(recvbuf), peers[1], recvtag)
