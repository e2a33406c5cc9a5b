"""Tensor, the tape and backward().

A Tensor wraps an ndarray (``.data``). Every differentiable operation is a small
``Function`` subclass (see ``minidl/ops/``) with ``forward`` on ndarrays and
``backward`` right beside it. Calling ``SomeOp.apply(a, b)`` runs forward and, when
gradients are wanted, records the Function as the new tensor's ``_ctx``: the graph
is the chain of Functions reachable through ``_ctx.parents``.

``backward()`` visits the Functions in reverse topological order, computed by an
iterative depth-first search (no Python recursion, so a chain of 100,000 ops is fine),
and calls each Function's ``backward`` exactly once, after the gradients of all of its
outputs have been summed.

dtypes: new tensors from Python floats/lists take the default dtype (float32; see
``set_default_dtype``); an ndarray keeps its dtype. An op on mixed float dtypes follows NumPy's
promotion (float32 with float64 gives float64), and the gradient flowing back to each input is cast
to that input's dtype, so a float32 parameter always gets a float32 ``.grad``. Python scalars in
arithmetic take the tensor's dtype (``x32 * 2.0`` stays float32). Integer and boolean tensors never
require grad: ops that output them (argmax, comparisons, casts to int) cut the graph.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

_default_dtype: np.dtype = np.dtype(np.float32)


class _GradMode(threading.local):
    """Whether ops record the graph. Per thread: simulated MPI ranks are threads of one process,
    and one rank's ``no_grad()`` must not switch off recording in another."""

    enabled: bool = True


_grad_mode = _GradMode()


# ----------------------------------------------------------------------------- global modes
def set_default_dtype(dtype: Any) -> None:
    """Set the float dtype of new tensors built from Python numbers/lists and of new parameters."""
    global _default_dtype
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"set_default_dtype: expected a floating dtype, got {dt}")
    _default_dtype = dt


def get_default_dtype() -> np.dtype:
    return _default_dtype


@contextlib.contextmanager
def no_grad() -> Iterator[None]:
    """Within this block no graph is recorded (inference, optimizer updates)."""
    prev, _grad_mode.enabled = _grad_mode.enabled, False
    try:
        yield
    finally:
        _grad_mode.enabled = prev


@contextlib.contextmanager
def enable_grad() -> Iterator[None]:
    prev, _grad_mode.enabled = _grad_mode.enabled, True
    try:
        yield
    finally:
        _grad_mode.enabled = prev


def is_grad_enabled() -> bool:
    return _grad_mode.enabled


# ----------------------------------------------------------------------------- helpers
def unbroadcast(grad: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """Sum ``grad`` down to ``shape``: the adjoint of NumPy broadcasting.

    Broadcasting prepends size-1 axes and stretches size-1 axes; the gradient of a
    stretched axis is the sum over it. Used by every broadcasting op's backward.
    """
    if grad.shape == tuple(shape):
        return grad
    extra = grad.ndim - len(shape)
    if extra > 0:
        grad = grad.sum(axis=tuple(range(extra)))
    stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)
    if stretched:
        grad = grad.sum(axis=stretched, keepdims=True)
    return grad.reshape(shape)


def _as_array(value: Any, dtype: Any = None) -> np.ndarray:
    """ndarray from a Tensor, ndarray or Python value. Python floats take the default dtype."""
    if isinstance(value, Tensor):
        value = value.data
    if isinstance(value, np.generic):  # a NumPy scalar (what a 0-d op returns) keeps its dtype
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        return value if dtype is None else value.astype(dtype, copy=False)
    arr = np.asarray(value)
    if dtype is not None:
        return arr.astype(dtype, copy=False)
    if arr.dtype.kind == "f":
        arr = arr.astype(_default_dtype)
    return arr


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


# ----------------------------------------------------------------------------- Function
class Function:
    """One differentiable operation: ``forward`` on ndarrays, ``backward`` beside it.

    Subclasses implement::

        def forward(self, *arrays, **kwargs) -> ndarray | tuple[ndarray, ...]
        def backward(self, *grad_outputs) -> ndarray | None | tuple[ndarray | None, ...]

    ``backward`` gets one gradient per output (zeros for an output that received none)
    and returns one gradient per tensor input, in order (None where not needed: check
    ``self.needs_input_grad[i]`` to skip work). Use ``self.save_for_backward(...)`` for
    what backward needs; it is freed after backward unless ``retain_graph=True``.
    Non-tensor arguments (axes, shapes) are passed as keyword arguments.
    """

    parents: tuple[Tensor, ...]
    needs_input_grad: tuple[bool, ...]
    saved_tensors: tuple[Any, ...]

    def save_for_backward(self, *values: Any) -> None:
        self.saved_tensors = values

    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    def backward(self, *grad_outputs: np.ndarray) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError

    @classmethod
    def apply(cls, *inputs: Any, **kwargs: Any) -> Any:
        """Run forward on the inputs' data; record the graph if any input requires grad.

        Returns one Tensor, or a tuple of Tensors when forward returns a tuple.
        """
        ctx = cls()
        tensors = tuple(x if isinstance(x, Tensor) else Tensor(_as_array(x)) for x in inputs)
        out = ctx.forward(*(t.data for t in tensors), **kwargs)
        multi = isinstance(out, tuple)
        outs = out if multi else (out,)
        record = _grad_mode.enabled and any(t.requires_grad for t in tensors)
        results = []
        if record:
            ctx.parents = tensors
            ctx.needs_input_grad = tuple(t.requires_grad for t in tensors)
            ctx.n_outputs = len(outs)
            ctx.out_meta = tuple((o.shape, o.dtype) for o in outs)
            ctx.retained = {}
            ctx.freed = False
            for i, o in enumerate(outs):
                t = Tensor(o, requires_grad=_is_float(o.dtype))
                if t.requires_grad:
                    t._ctx, t._out_index = ctx, i
                results.append(t)
        else:
            results = [Tensor(o) for o in outs]
        return tuple(results) if multi else results[0]

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


# ----------------------------------------------------------------------------- Tensor
class Tensor:
    """An ndarray with a gradient and a link to the Function that made it.

    Attributes:
        data: the values, an ndarray.
        grad: an ndarray of ``data``'s shape after backward (leaves, or retain_grad()), else None.
        requires_grad: whether gradients flow to (and through) this tensor.
        name: an optional label, shown in repr and in graph drawings.
    """

    __array_priority__ = 100.0  # ndarray <op> Tensor defers to Tensor's reflected op

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None, name: str = ""):
        self.data: np.ndarray = _as_array(data, dtype)
        if requires_grad and not _is_float(self.data.dtype):
            raise TypeError(f"only floating-point tensors can require gradients, got dtype {self.data.dtype}")
        self.requires_grad: bool = bool(requires_grad)
        self.grad: np.ndarray | None = None
        self.name = name
        self._ctx: Function | None = None
        self._out_index = 0
        self._retain = False

    # -- basic properties
    @property
    def shape(self) -> tuple[int, ...]:
        return self.data.shape

    @property
    def dtype(self) -> np.dtype:
        return self.data.dtype

    @property
    def ndim(self) -> int:
        return self.data.ndim

    @property
    def size(self) -> int:
        return self.data.size

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    def __len__(self) -> int:
        return len(self.data)

    def numpy(self) -> np.ndarray:
        return self.data

    def item(self) -> Any:
        return self.data.item()

    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data, cut from the graph."""
        return Tensor(self.data)

    def requires_grad_(self, flag: bool = True) -> Tensor:
        if flag and not _is_float(self.dtype):
            raise TypeError(f"only floating-point tensors can require gradients, got dtype {self.dtype}")
        self.requires_grad = flag
        return self

    def retain_grad(self) -> Tensor:
        """Keep this non-leaf tensor's gradient in ``.grad`` after backward."""
        if self._ctx is not None:
            self._retain = True
            self._ctx.retained[self._out_index] = self
        return self

    def zero_grad(self) -> None:
        self.grad = None

    def astype(self, dtype: Any) -> Tensor:
        from minidl.ops import Cast

        return Cast.apply(self, dtype=np.dtype(dtype))

    def __repr__(self) -> str:
        extra = ", requires_grad=True" if self.requires_grad else ""
        label = f", name={self.name!r}" if self.name else ""
        fn = f", grad_fn={self._ctx!r}" if self._ctx is not None else ""
        return f"Tensor({np.array2string(self.data, precision=4, threshold=20)}, dtype={self.dtype}{extra}{fn}{label})"

    def __hash__(self) -> int:
        return id(self)

    def __bool__(self) -> bool:
        return bool(self.data)

    # -- backward
    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` by reverse-mode autodiff.

        ``grad`` is the upstream gradient (same shape as self); it may be omitted only for
        a tensor with one element. Gradients add up across calls until zeroed.
        """
        if not self.requires_grad:
            raise RuntimeError("backward: this tensor does not require grad and has no graph")
        if grad is None:
            if self.data.size != 1:
                raise RuntimeError(
                    f"backward: grad can be implicitly created only for a scalar output; this tensor has "
                    f"shape {self.shape}, so pass grad= an array of that shape"
                )
            grad = np.ones_like(self.data)
        else:
            grad = _as_array(grad, self.dtype)
            if grad.shape != self.shape:
                raise ValueError(f"backward: grad has shape {grad.shape}, tensor has shape {self.shape}")
        if self._ctx is None:
            _accumulate_leaf(self, grad)
            return
        _run_backward(self, grad, retain_graph)


def _accumulate_leaf(t: Tensor, g: np.ndarray) -> None:
    if g.dtype != t.dtype:
        g = g.astype(t.dtype)
    if g.shape != t.shape:
        g = np.broadcast_to(g, t.shape)
    if t.grad is None:
        t.grad = np.array(g, copy=True)  # own the buffer: later accumulation is in place
    else:
        t.grad += g


def _topological_order(root: Function) -> list[Function]:
    """Functions reachable from ``root``, each after all Functions that consume its outputs.

    Iterative post-order DFS: a Function is appended once all its parents' Functions are done;
    reversing the list gives an order where every consumer precedes its producers.
    """
    order: list[Function] = []
    visited: set[int] = {id(root)}
    stack: list[tuple[Function, Iterator[Tensor]]] = [(root, iter(root.parents))]
    while stack:
        fn, parents = stack[-1]
        for p in parents:
            pf = p._ctx
            if pf is not None and id(pf) not in visited:
                visited.add(id(pf))
                stack.append((pf, iter(pf.parents)))
                break
        else:
            stack.pop()
            order.append(fn)
    order.reverse()
    return order


def _run_backward(root: Tensor, grad: np.ndarray, retain_graph: bool) -> None:
    root_fn = root._ctx
    assert root_fn is not None
    order = _topological_order(root_fn)
    # grads[id(fn)] holds one slot per output of fn, summed as consumers report.
    grads: dict[int, list[np.ndarray | None]] = {id(root_fn): [None] * root_fn.n_outputs}
    grads[id(root_fn)][root._out_index] = grad
    for fn in order:
        if fn.freed:
            raise RuntimeError(
                f"backward: trying to backward through the graph a second time ({fn!r}'s saved values "
                "were freed after the first backward); call backward(retain_graph=True) the first time"
            )
        slots = grads.pop(id(fn), None)
        if slots is None:
            continue
        out_grads = tuple(
            g if g is not None else np.zeros(shape, dtype) for g, (shape, dtype) in zip(slots, fn.out_meta)
        )
        for idx, t in fn.retained.items():
            t.grad = out_grads[idx].copy() if t.grad is None else t.grad + out_grads[idx]
        in_grads = fn.backward(*out_grads)
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        if len(in_grads) != len(fn.parents):
            raise RuntimeError(f"{fn!r}.backward returned {len(in_grads)} gradients for {len(fn.parents)} inputs")
        if not retain_graph:
            fn.saved_tensors = ()
            fn.freed = True
        for p, g, needed in zip(fn.parents, in_grads, fn.needs_input_grad):
            if not needed or g is None:
                continue
            if g.dtype != p.dtype:
                g = g.astype(p.dtype)  # mixed-dtype op: each input's gradient has the input's dtype
            if g.shape != p.shape:
                raise RuntimeError(
                    f"{fn!r}.backward gave a gradient of shape {g.shape} for an input of shape {p.shape}"
                )
            pf = p._ctx
            if pf is None:
                _accumulate_leaf(p, g)
            else:
                s = grads.setdefault(id(pf), [None] * pf.n_outputs)
                i = p._out_index
                if s[i] is None:
                    s[i] = g
                else:
                    s[i] = s[i] + g  # not in place: g may alias an array another op still holds


# ----------------------------------------------------------------------------- construction
def tensor(data: Any, requires_grad: bool = False, dtype: Any = None, name: str = "") -> Tensor:
    """Build a Tensor. Python floats/lists take the default dtype (float32 unless changed);
    an ndarray keeps its dtype unless ``dtype`` is given (as torch.tensor does)."""
    if isinstance(data, Tensor):
        data = data.data
    return Tensor(np.array(_as_array(data, dtype), copy=True), requires_grad=requires_grad, name=name)


def _factory(fill):
    def make(*shape: Any, dtype: Any = None, requires_grad: bool = False) -> Tensor:
        if len(shape) == 1 and isinstance(shape[0], Sequence):
            shape = tuple(shape[0])
        return Tensor(fill(shape, dtype or _default_dtype), requires_grad=requires_grad)

    return make


zeros = _factory(lambda s, d: np.zeros(s, d))
ones = _factory(lambda s, d: np.ones(s, d))


def randn(*shape: Any, dtype: Any = None, requires_grad: bool = False, rng: Any = None) -> Tensor:
    if len(shape) == 1 and isinstance(shape[0], Sequence):
        shape = tuple(shape[0])
    rng = rng if rng is not None else np.random.default_rng()
    return Tensor(rng.standard_normal(shape).astype(dtype or _default_dtype), requires_grad=requires_grad)
