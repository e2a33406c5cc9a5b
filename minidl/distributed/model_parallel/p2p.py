"""Point-to-point messages inside the autograd graph: ``send`` and ``recv`` as differentiable ops.

Split a network over ranks (model parallelism, pipelining) and the chain rule crosses ranks too.
Stage k computes y = f_k(x) and sends y to stage k+1; backward must bring dL/dy from stage k+1
back to stage k. Here that is what the two ops do, so ``backward()`` on each rank runs the whole
split graph as if it were one:

    rank k:    y = stage(x);  token = send(y, dst=k+1)   ...   token.backward()
                                   |  forward: y ->                 ^  backward: receives dL/dy
                                   v                                |
    rank k+1:  x = recv(shape, dtype, src=k);  loss = f(x)  ...  loss.backward()   (sends dL/dx back)

``send`` returns a 0-d *token* (value 0) that depends on y: calling ``token.backward()`` runs
``Send.backward``, which waits for dL/dy from ``dst`` and passes it on to whatever made y. Several
sends from one stage: ``(t1 + t2).backward()``. ``recv`` returns the received array as a tensor
whose backward sends its gradient to ``src``. The gradient goes back on the same tag in the opposite
direction (rank pairs tell the two directions apart).

The rule that keeps ranks matched: in grad mode (not inside ``no_grad()``) every floating-point
``send`` is answered in backward by exactly one gradient message, so both ends must call backward
(on the token, or on a loss that depends on the received tensor). Integer arrays (token ids) and
anything sent under ``no_grad()`` travel forward only.

Also here: ``send_meta`` / ``recv_meta`` for when the receiver does not know the shape (a small
fixed-size header first), ``StageBoundary`` (a stage's two neighbours and its messages, with headers)
and ``CountingComm`` (``minidl.distributed.counting``) measures the communication volume of model,
tensor and pipeline parallelism.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.timeout import base_comm
from minidl.tensor import Function, Tensor, is_grad_enabled

# dtypes a header can name (index = code): what activations and token ids are made of
_DTYPES = tuple(np.dtype(t) for t in ("float64", "float32", "float16", "int64", "int32", "uint8", "bool"))
MAX_DIMS = 8
_HEADER_WORDS = 2 + MAX_DIMS  # [dtype code, ndim, dims...]


# ----------------------------------------------------------------------------- checks
def _check_peer(comm: Any, peer: int, what: str) -> int:
    size = comm.Get_size()
    if not isinstance(peer, (int, np.integer)) or not 0 <= peer < size:
        raise ValueError(f"{what}: rank {peer!r} out of range for a communicator of size {size}")
    if peer == comm.Get_rank():
        raise ValueError(f"{what}: rank {peer} is this rank; a message to oneself would never match")
    return int(peer)


def _check_tag(tag: int, what: str) -> int:
    if not isinstance(tag, (int, np.integer)) or tag < 0:
        raise ValueError(f"{what}: tag must be an integer >= 0, got {tag!r}")
    return int(tag)


def _new_status(comm: Any) -> Any:
    """An ``MPI.Status`` for an mpi4py communicator, the simulated one's ``Status`` otherwise."""
    comm = base_comm(comm)  # see through CountingComm and TimeoutComm
    try:
        from mpi4py import MPI
    except ImportError:  # pragma: no cover - mpi4py is a dependency; the simulator works without it
        MPI = None
    if MPI is not None and isinstance(comm, MPI.Comm):
        return MPI.Status()
    from collectives.inprocess import Status

    return Status()


def recv_array(comm: Any, buf: np.ndarray, src: int, tag: int, what: str, content: str | None = None) -> np.ndarray:
    """``comm.Recv`` into ``buf``, with a clear error if the message does not have ``buf``'s size.

    MPI itself rejects a longer message (truncation) but silently accepts a shorter one, leaving
    part of ``buf`` unwritten; the status's byte count catches that. ``content`` says what the bytes
    are, for the message (default: buf's dtype and shape).
    """
    content = content or f"{buf.dtype} {buf.shape}"
    status = _new_status(comm)
    try:
        comm.Recv(buf, source=src, tag=tag, status=status)
    except Exception as exc:
        exc.add_note(f"{what}: expected {buf.nbytes} bytes ({content}) from rank {src}, tag {tag}")
        raise
    got = status.Get_count()
    if got != buf.nbytes:
        raise ValueError(
            f"{what}: expected {buf.nbytes} bytes ({content}) from rank {src} "
            f"(tag {tag}), got a message of {got} bytes: the two ranks disagree on the shape"
        )
    return buf


# ----------------------------------------------------------------------------- the two ops
class Send(Function):
    """Forward: send x to ``dst``; output a 0-d token. Backward: receive dL/dx from ``dst``.

    The second input is an anchor (a 0-d leaf requiring grad) so that the op is recorded even when x
    itself needs no gradient: the gradient message from ``dst`` must be received all the same.
    """

    def forward(self, x, anchor, *, dst: int, comm: Any, tag: int, describe: bool):
        if describe:
            send_described(comm, x, dst, tag)
        else:
            comm.Send(np.ascontiguousarray(x), dest=dst, tag=tag)
        self.shape, self.dtype, self.dst, self.comm, self.tag = x.shape, x.dtype, dst, comm, tag
        return np.zeros((), x.dtype)

    def backward(self, g):
        grad = recv_array(self.comm, np.empty(self.shape, self.dtype), self.dst, self.tag, "send (backward)")
        return (grad if self.needs_input_grad[0] else None), None


class Recv(Function):
    """Forward: receive an array of ``shape``/``dtype`` from ``src``. Backward: send dL/d(output) to ``src``.

    The only input is the anchor that gets the op recorded; its gradient is None.
    """

    def forward(
        self, anchor, *, shape: tuple[int, ...], dtype: np.dtype, src: int, comm: Any, tag: int, describe: bool
    ):
        if describe:
            out = recv_described(comm, shape, dtype, src, tag)
        else:
            out = recv_array(comm, np.empty(shape, dtype), src, tag, "recv")
        self.src, self.comm, self.tag, self.dtype = src, comm, tag, out.dtype
        return out

    def backward(self, g):
        self.comm.Send(np.ascontiguousarray(g, dtype=self.dtype), dest=self.src, tag=self.tag)
        return None


def _anchor() -> Tensor:
    return Tensor(np.zeros(()), requires_grad=True)


def send(x: Tensor | np.ndarray, dst: int, comm: Any = None, tag: int = 0, describe: bool = True) -> Tensor:
    """Send ``x`` to rank ``dst``; return a 0-d token whose backward receives dL/dx from ``dst``.

    Floating-point x in grad mode: recorded (the receiver's backward will send a gradient back).
    Otherwise (integers, ``no_grad()``): a plain send, and the token is a constant. The message
    carries x's dtype and shape, which ``recv`` checks (``describe=False``: the bare bytes, for a
    receiver that has just been told them by ``send_meta``, as ``StageBoundary`` does).
    """
    comm = get_comm(comm)
    dst, tag = _check_peer(comm, dst, "send"), _check_tag(tag, "send")
    data = x.data if isinstance(x, Tensor) else np.asarray(x)
    if data.dtype.kind == "f" and is_grad_enabled():
        x = x if isinstance(x, Tensor) else Tensor(data)
        return Send.apply(x, _anchor(), dst=dst, comm=comm, tag=tag, describe=describe)
    send_described(comm, data, dst, tag) if describe else comm.Send(np.ascontiguousarray(data), dest=dst, tag=tag)
    return Tensor(np.zeros((), data.dtype if data.dtype.kind == "f" else np.float64))


def recv(shape: tuple[int, ...], dtype: Any, src: int, comm: Any = None, tag: int = 0, describe: bool = True) -> Tensor:
    """Receive an array of ``shape`` and ``dtype`` from rank ``src`` as a tensor in the graph.

    Floating-point in grad mode: the tensor requires grad, and its gradient is sent back to ``src``
    during backward. Otherwise a plain receive into a constant tensor. A message whose dtype or shape
    is not the one asked for is a ValueError naming both (``describe`` must match the sender's).
    """
    comm = get_comm(comm)
    src, tag = _check_peer(comm, src, "recv"), _check_tag(tag, "recv")
    shape, dtype = tuple(int(n) for n in shape), np.dtype(dtype)
    if dtype.kind == "f" and is_grad_enabled():
        return Recv.apply(_anchor(), shape=shape, dtype=dtype, src=src, comm=comm, tag=tag, describe=describe)
    if describe:
        return Tensor(recv_described(comm, shape, dtype, src, tag))
    return Tensor(recv_array(comm, np.empty(shape, dtype), src, tag, "recv"))


# ----------------------------------------------------------------------------- described messages
# A forward message carries its own description: [dtype, ndim, dims...] (DESCRIPTION_BYTES, int64 words)
# before the data, in the same message. The receiver checks both against what it asked for, so an
# int64 taken for a float64 of the same size, or a (2, 3) taken for a (3, 2), is an error naming both
# instead of bytes silently reinterpreted. (Gradients coming back need none: their shape is the forward's.)
DESCRIPTION_BYTES = 8 * _HEADER_WORDS


def describe_array(data: np.ndarray, what: str) -> np.ndarray:
    """The int64 words [ord(dtype.char), ndim, dims..., 0...] (at most MAX_DIMS dims)."""
    if data.ndim > MAX_DIMS:
        raise ValueError(f"{what}: at most {MAX_DIMS} dimensions, got shape {data.shape}")
    words = np.zeros(_HEADER_WORDS, np.int64)
    words[0], words[1], words[2 : 2 + data.ndim] = ord(data.dtype.char), data.ndim, data.shape
    return words


def send_described(comm: Any, x: np.ndarray, dst: int, tag: int) -> None:
    """Send ``x`` with its description in front, as one message (one copy of x)."""
    data = np.ascontiguousarray(x)
    message = np.empty(DESCRIPTION_BYTES + data.nbytes, np.uint8)
    message[:DESCRIPTION_BYTES] = describe_array(data, "send").view(np.uint8)
    message[DESCRIPTION_BYTES:] = data.reshape(-1).view(np.uint8)
    comm.Send(message, dest=dst, tag=tag)


def recv_described(comm: Any, shape: tuple[int, ...], dtype: np.dtype, src: int, tag: int) -> np.ndarray:
    """Receive a message of ``send_described``; refuse one whose dtype or shape is not the one asked for."""
    want = np.empty(shape, dtype)
    content = f"{want.dtype} {want.shape} after a {DESCRIPTION_BYTES}-byte description"
    message = recv_array(comm, np.empty(DESCRIPTION_BYTES + want.nbytes, np.uint8), src, tag, "recv", content)
    words = message[:DESCRIPTION_BYTES].view(np.int64)
    code, ndim = int(words[0]), int(words[1])
    try:
        sent_dtype = np.dtype(chr(code))
    except (TypeError, ValueError):
        sent_dtype = None
    sent_shape = tuple(int(n) for n in words[2 : 2 + ndim]) if 0 <= ndim <= MAX_DIMS else None
    if sent_dtype != want.dtype or sent_shape != want.shape:
        sent = (
            f"{sent_dtype} {sent_shape}" if sent_dtype is not None and sent_shape is not None else "a malformed header"
        )
        raise ValueError(
            f"recv: expected {want.dtype} {want.shape} from rank {src} (tag {tag}), but rank {src} sent {sent}: "
            "the two ranks disagree on what travels"
        )
    return message[DESCRIPTION_BYTES:].view(want.dtype).reshape(want.shape)


# ----------------------------------------------------------------------------- headers
def send_meta(x: Tensor | np.ndarray, dst: int, comm: Any = None, tag: int = 0) -> None:
    """Tell ``dst`` the shape and dtype of the array that follows (one message of 80 bytes)."""
    comm = get_comm(comm)
    data = x.data if isinstance(x, Tensor) else np.asarray(x)
    if data.dtype not in _DTYPES:
        raise TypeError(f"send_meta: cannot describe dtype {data.dtype}; one of {[str(d) for d in _DTYPES]}")
    if data.ndim > MAX_DIMS:
        raise ValueError(f"send_meta: at most {MAX_DIMS} dimensions, got shape {data.shape}")
    head = np.zeros(_HEADER_WORDS, np.int64)
    head[0], head[1], head[2 : 2 + data.ndim] = _DTYPES.index(data.dtype), data.ndim, data.shape
    comm.Send(head, dest=_check_peer(comm, dst, "send_meta"), tag=_check_tag(tag, "send_meta"))


def recv_meta(src: int, comm: Any = None, tag: int = 0) -> tuple[tuple[int, ...], np.dtype]:
    """The (shape, dtype) that ``send_meta`` on rank ``src`` described."""
    comm = get_comm(comm)
    head = recv_array(
        comm,
        np.empty(_HEADER_WORDS, np.int64),
        _check_peer(comm, src, "recv_meta"),
        _check_tag(tag, "recv_meta"),
        "recv_meta",
    )
    code, ndim = int(head[0]), int(head[1])
    if not (0 <= code < len(_DTYPES) and 0 <= ndim <= MAX_DIMS):
        raise ValueError(
            f"recv_meta: rank {src} sent a malformed header {head.tolist()} (tag {tag}): "
            "the ranks' messages are out of step"
        )
    return tuple(int(n) for n in head[2 : 2 + ndim]), _DTYPES[code]


class StageBoundary:
    """The edges of one stage of a model split over ranks: where its input comes from, where its output goes.

    ``prev`` / ``next``: neighbour ranks (None at the ends). Each activation travels as a header
    (shape and dtype, so batch sizes may change between calls) followed by the data; the gradient
    comes back without a header, its shape being known.

        boundary = StageBoundary(comm, prev=rank - 1 if rank else None, next=...)
        x = boundary.receive() if boundary.prev is not None else inputs
        y = stage(x)
        result = boundary.send(y) if boundary.next is not None else loss_fn(y, target)
        result.backward()    # on every rank: the token, or the loss
    """

    def __init__(self, comm: Any = None, prev: int | None = None, next: int | None = None, tag: int = 0):
        self.comm = get_comm(comm)
        self.prev = None if prev is None else _check_peer(self.comm, prev, "StageBoundary(prev)")
        self.next = None if next is None else _check_peer(self.comm, next, "StageBoundary(next)")
        self.tag = _check_tag(tag, "StageBoundary")

    def receive(self) -> Tensor:
        """The activation from ``prev`` (a tensor in the graph; integer ids come as constants)."""
        if self.prev is None:
            raise RuntimeError("StageBoundary.receive: this is the first stage (prev is None); it has no sender")
        shape, dtype = recv_meta(self.prev, self.comm, self.tag)
        return recv(shape, dtype, self.prev, self.comm, self.tag, describe=False)  # send_meta told them

    def send(self, y: Tensor | np.ndarray) -> Tensor:
        """Send ``y`` to ``next``; the returned token's backward receives dL/dy."""
        if self.next is None:
            raise RuntimeError("StageBoundary.send: this is the last stage (next is None); it has no receiver")
        send_meta(y, self.next, self.comm, self.tag)
        return send(y, self.next, self.comm, self.tag, describe=False)

    def __repr__(self) -> str:
        return f"StageBoundary(rank={self.comm.Get_rank()}, prev={self.prev}, next={self.next}, tag={self.tag})"
