"""What the simulated communicator hands its ranks: messages, requests and statuses with mpi4py's interface.

A ``Request`` is a pending send or receive of one rank; ``Wait``, ``Test`` and ``Request.Waitall`` ask
the world (``simulated._World``) to complete it. A completed receive fills a ``Status`` (source, tag,
bytes); every message is kept as a ``Message`` (logical send step and arrival, and its bytes when asked),
which is what the tests and tutorials read schedules from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from collectives.simulated import _World

ANY_SOURCE = -2
ANY_TAG = -1


@dataclass
class Message:
    """One point-to-point message: sent at logical ``step``, received at logical ``arrival``."""

    step: int
    source: int
    dest: int
    tag: int
    nbytes: int
    arrival: int | None = None
    data: bytes | None = None  # the bytes sent, when simulate(..., record_data=True)


class Status:
    """The part of MPI.Status a receiver asks for: who sent, with what tag, how many bytes."""

    def __init__(self) -> None:
        self.source, self.tag, self.count = ANY_SOURCE, ANY_TAG, 0

    def Get_source(self) -> int:
        return self.source

    def Get_tag(self) -> int:
        return self.tag

    def Get_count(self) -> int:
        """Bytes received (mpi4py's default datatype for Get_count is MPI.BYTE)."""
        return self.count


class Request:
    """A pending send or receive; complete it with Wait, Test or Request.Waitall."""

    def __init__(self, world: _World, owner: int, kind: str, call: str, peer: int, tag: int, buf: np.ndarray, context):
        self.world, self.owner, self.kind, self.call = world, owner, kind, call
        self.peer, self.tag, self.buf, self.context = peer, tag, buf, context
        self.done = False
        self.error: Exception | None = None
        self.message: Message | None = None  # the message sent or taken
        self.group: tuple[int, ...] | None = None  # the communicator's world ranks, to report the source in
        self.finished = False  # completion seen by the owner (clock moved on)

    def Wait(self, status: Status | None = None) -> bool:
        self.world.wait(self.owner, [self])
        _fill(status, self)
        return True

    def Test(self, status: Status | None = None) -> bool:
        if not self.world.test(self.owner, self):
            return False
        _fill(status, self)
        return True

    @staticmethod
    def Waitall(requests: Sequence[Request], statuses: list[Status] | None = None) -> bool:
        requests = list(requests)
        if requests:
            requests[0].world.wait(requests[0].owner, requests)
        for i, request in enumerate(requests):
            _fill(statuses[i] if statuses else None, request)
        return True

    def describe(self) -> str:
        if self.kind == "send":
            return f"{self.call}(dest={self.peer}, tag={self.tag}, {self.buf.size} bytes) not yet received"
        src = "ANY_SOURCE" if self.peer == ANY_SOURCE else self.peer
        tag = "ANY_TAG" if self.tag == ANY_TAG else self.tag
        return f"{self.call}(source={src}, tag={tag}, buffer of {self.buf.size} bytes) with no matching send"


def _fill(status: Status | None, request: Request) -> None:
    if status is not None and request.kind == "recv" and request.message is not None:
        source = request.message.source
        if request.group is not None:
            source = request.group.index(source)  # the sender's rank in the receiver's communicator
        status.source, status.tag, status.count = source, request.message.tag, request.message.nbytes


def _as_bytes(buf: Any, writable: bool, what: str) -> np.ndarray:
    """A flat uint8 view of a contiguous buffer (no copy)."""
    if isinstance(buf, (list, tuple)):
        raise TypeError(
            f"{what}: the simulated communicator takes plain buffers (NumPy arrays), not [buffer, datatype] specs"
        )
    arr = buf if isinstance(buf, np.ndarray) else np.frombuffer(buf, dtype=np.uint8)
    if not arr.flags.c_contiguous:
        raise ValueError(f"{what}: buffer must be C-contiguous, got strides {arr.strides}")
    if writable and not arr.flags.writeable:
        raise ValueError(f"{what}: receive buffer is read-only")
    return arr.reshape(-1).view(np.uint8)
