"""The autograd engine: Function (one op, forward and backward side by side), grad mode, and backward.

Calling ``SomeOp.apply(a, b)`` runs ``forward`` on the inputs' ndarrays and, when gradients are wanted, records
the Function as the new tensor's ``_ctx``: the graph is the chain of Functions reachable through
``_ctx.parents``. ``backward`` visits the Functions in reverse topological order, computed by an iterative
depth-first search (no Python recursion, so a chain of 100,000 ops is fine), and calls each Function's
``backward`` exactly once, after the gradients of all of its outputs have been summed.

This module never imports ``minidl.tensor`` at run time (tensor.py hands its class over with
``use_tensor_class``), so the one import circle of the package stays tensor <-> ops.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import numpy as np

from minidl import amp, saved

if TYPE_CHECKING:
    from minidl.tensor import Tensor

__all__ = ["Function", "backward", "enable_grad", "is_grad_enabled", "no_grad", "unbroadcast"]


class _GradMode(threading.local):
    """Whether ops record the graph. Per thread: simulated MPI ranks are threads of one process,
    and one rank's ``no_grad()`` must not switch off recording in another."""

    enabled: bool = True


_grad_mode = _GradMode()


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


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


_tensor_class: Any = None


def use_tensor_class(cls: type[Tensor]) -> None:
    """Called once by minidl/tensor.py: the class of the tensors that ``Function.apply`` returns."""
    global _tensor_class
    _tensor_class = cls


class Function:
    """One differentiable operation: ``forward`` on ndarrays, ``backward`` beside it.

    Subclasses implement::

        def forward(self, *arrays, **kwargs) -> ndarray | tuple[ndarray, ...]
        def backward(self, *grad_outputs) -> ndarray | None | tuple[ndarray | None, ...]

    ``backward`` gets one gradient per output (zeros for an output that received none)
    and returns one gradient per tensor input, in order (None where not needed: check
    ``self.needs_input_grad[i]`` to skip work). Use ``self.save_for_backward(...)`` for
    what backward needs; it is freed after backward unless ``retain_graph=True``, and backward
    raises if the memory of a saved array was written in place meanwhile (see minidl/saved.py).
    Non-tensor arguments (axes, shapes) are passed as keyword arguments.
    """

    parents: tuple[Tensor, ...]
    needs_input_grad: tuple[bool, ...]
    saved_tensors: tuple[Any, ...] = ()
    n_outputs: int
    out_meta: tuple[tuple[tuple[int, ...], np.dtype], ...]
    retained: dict[int, Tensor]
    freed: bool = False
    held: tuple[tuple[int, int], ...] = ()  # (memory id, version) of each saved array's memory
    amp_round: Any = None  # the 16-bit rounding of amp.autocast, when recorded inside one
    # Set by a subclass whose backward returns only new arrays, a distinct one per input, that nothing else
    # references: the engine then adopts such a gradient as a leaf's first ``.grad`` instead of copying it
    # (for the LM's 2M-entry decoder and embedding tables, an 8 MB copy each per step).
    fresh_grads: bool = False
    # Set by the engine while it runs the last backward through this Function (no ``retain_graph``): the
    # saved values will be freed right after, so backward may overwrite them (and return them as a gradient)
    # instead of allocating. False wherever backward is called otherwise, e.g. directly in a test.
    last_use: bool = False

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
        Tensor = _tensor_class
        ctx = cls()
        tensors = tuple(x if isinstance(x, Tensor) else Tensor(x) for x in inputs)
        reduce = amp.active()  # inside amp.autocast: emulate 16-bit arithmetic by rounding what goes in and out
        data = tuple(t._data for t in tensors)
        out = ctx.forward(*(amp.rounded(data, reduce) if reduce else data), **kwargs)
        multi = isinstance(out, tuple)
        outs = out if multi else (out,)
        if reduce:
            outs, ctx.amp_round = amp.rounded(outs, reduce), reduce
        if not (_grad_mode.enabled and any(t.requires_grad for t in tensors)):
            ctx.saved_tensors = ()
            results = [Tensor(o) for o in outs]
            return tuple(results) if multi else results[0]
        ctx.parents = tensors
        ctx.needs_input_grad = tuple(t.requires_grad for t in tensors)
        ctx.n_outputs = len(outs)
        ctx.out_meta = tuple((o.shape, o.dtype) for o in outs)
        ctx.retained = {}
        if ctx.saved_tensors:
            ctx.held = saved.hold(ctx.saved_tensors)
        results = []
        for i, o in enumerate(outs):
            t = Tensor(o, requires_grad=_is_float(o.dtype))
            if t.requires_grad:
                t._ctx, t._out_index = ctx, i
            results.append(t)
        return tuple(results) if multi else results[0]

    def free(self) -> None:
        """Drop the saved values (after backward, unless the graph is retained)."""
        self.saved_tensors = ()
        self.freed = True
        if self.held:
            saved.release(self.held)
            self.held = ()

    def check_saved(self) -> None:
        """Raise if the memory of a saved array was written in place since forward saved it."""
        changed = saved.modified(self.held)
        if changed is None:
            return
        oid, then, now = changed
        which = [
            f"input {i} ({p.name + ', ' if p.name else ''}shape {p.shape})"
            for i, p in enumerate(self.parents)
            if _owner_id(p) == oid
        ]
        raise RuntimeError(
            f"backward: {', '.join(which) or 'an output'} of {self!r} was modified in place after it was saved for "
            f"backward (its memory is at version {now}, the op saved version {then}); do the in-place write "
            "(an optimizer step, a .data assignment) after backward, or on a copy"
        )

    def __del__(self) -> None:
        if self.held:  # a graph dropped without backward still lets go of its memory
            try:
                saved.release(self.held)
            except (AttributeError, TypeError):  # at interpreter exit the module may already be torn down
                pass

    def __repr__(self) -> str:
        return f"<{type(self).__name__}>"


def _owner_id(t: Tensor) -> int:
    return id(saved.memory_owner(t._data))


def accumulate_grad(t: Tensor, g: np.ndarray, owned: bool = False) -> None:
    """Add ``g`` into the leaf's ``.grad`` (cast to its dtype, broadcast to its shape). ``owned``: the caller
    guarantees that nothing else references ``g``, so a first gradient may become ``.grad`` without a copy."""
    if g.dtype != t.dtype:
        g = g.astype(t.dtype)
    if g.shape != t.shape:
        g, owned = np.broadcast_to(g, t.shape), False
    if t.grad is None:
        adopt = owned and g.flags.writeable and g.flags.c_contiguous and g.base is None
        t.grad = g if adopt else np.array(g, copy=True)  # own the buffer: later accumulation is in place
    else:
        t.grad += g


def topological_order(root: Function) -> list[Function]:
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


def backward(root: Tensor, grad: np.ndarray | None = None, retain_graph: bool = False) -> None:
    """Accumulate d(root)/d(leaf) * grad into every leaf's ``.grad`` reached from ``root`` (``Tensor.backward``).

    micrograd's reverse sweep: Functions consumers first, each one's backward on its outputs' summed gradients,
    each input's gradient on into a leaf's ``.grad`` or its producer's slot. ``grad`` defaults to 1 for a
    one-element root. What the engine adds (hooks, buffers reused, 16-bit rounding) lives in ``Sweep``, whose
    ``before`` and ``after`` wrap the chain-rule call as a profiler wraps a call it times.
    """
    grad = _seed(root, grad)
    if root._ctx is None:
        return accumulate_grad(root, grad)
    order = topological_order(root._ctx)
    grads: dict[int, list[np.ndarray | None]] = {id(root._ctx): [None] * root._ctx.n_outputs}  # a slot per output
    grads[id(root._ctx)][root._out_index] = grad
    with Sweep(order, retain_graph) as sweep:
        for fn in order:
            if fn.freed:
                raise RuntimeError(
                    f"backward: trying to backward through the graph a second time ({fn!r}'s saved values "
                    "were freed after the first backward); call backward(retain_graph=True) the first time"
                )
            slots = grads.pop(id(fn), None)
            if slots is None:
                continue
            out_grads = sweep.before(fn, slots)
            in_grads = fn.backward(*out_grads)  # the chain rule: d(root)/d(inputs) from d(root)/d(outputs)
            for p, g, needed in zip(fn.parents, sweep.after(fn, in_grads), fn.needs_input_grad):
                if needed and p._ctx is None:
                    sweep.to_leaf(fn, p, g)
                elif needed and g is not None and p._ctx is not None:
                    s = grads.setdefault(id(p._ctx), [None] * p._ctx.n_outputs)
                    prev, g = s[p._out_index], _checked(fn, p, g)
                    s[p._out_index] = g if prev is None else prev + g  # not in place: g may alias a saved array


def _seed(root: Tensor, grad: np.ndarray | None) -> np.ndarray:
    """The gradient the sweep starts from: ``grad``, checked against the root's shape, or 1 for a scalar."""
    if not root.requires_grad:
        raise RuntimeError("backward: this tensor does not require grad and has no graph")
    if grad is None:
        if root.size != 1:
            raise RuntimeError(
                f"backward: grad can be implicitly created only for a scalar output; this tensor has "
                f"shape {root.shape}, so pass grad= an array of that shape"
            )
        return np.ones(root.shape, root.dtype)
    if grad.shape != root.shape:
        raise ValueError(f"backward: grad has shape {grad.shape}, tensor has shape {root.shape}")
    return grad


def _checked(fn: Function, p: Tensor, g: np.ndarray) -> np.ndarray:
    """The gradient ``fn.backward`` gave for its input ``p``, in ``p``'s dtype; a wrong shape raises."""
    if g.dtype != p.dtype:
        g = g.astype(p.dtype)  # mixed-dtype op: each input's gradient has the input's dtype
    if g.shape != p.shape:
        raise RuntimeError(f"{fn!r}.backward gave a gradient of shape {g.shape} for an input of shape {p.shape}")
    return g


class Sweep:
    """What one backward pass does beyond the textbook loop, at its three points: before and after a
    Function's backward (``before``, ``after``) and adding a gradient into a leaf (``to_leaf``).

    - ``last_use``: a Function's backward is told when its saved values are freed right after, so it may
      overwrite them instead of allocating; ``retain_graph=False`` frees them.
    - mixed precision: a Function recorded under ``amp.autocast`` has its input gradients rounded to 16 bits.
    - ``fresh_grads``: a leaf's first gradient from such a Function is adopted as ``.grad`` without a copy.
    - post-accumulate hooks: a leaf used by k recorded ops receives k gradients in this pass; its hooks run
      once the k-th has been added (how data parallelism knows a gradient is final and can start its
      allreduce while backward goes on: overlap). Hooked leaves that got no gradient run them at the end.
    """

    def __init__(self, order: list[Function], retain_graph: bool):
        self.retain_graph = retain_graph
        self.current: Function | None = None  # the Function whose backward runs (between before and after)
        self.pending: dict[int, tuple[Tensor, int]] = {}  # hooked leaf -> (leaf, gradients still to come)
        for fn in order:
            for p, needed in zip(fn.parents, fn.needs_input_grad):
                if needed and p._ctx is None and p._hooks:
                    self.pending[id(p)] = (p, self.pending.get(id(p), (p, 0))[1] + 1)

    def __enter__(self) -> Sweep:
        return self

    def __exit__(self, error: type[BaseException] | None, *_: Any) -> None:
        if self.current is not None:  # a backward raised: outside the engine its saved values are intact again
            self.current.last_use = False
        if error is None:  # hooked leaves that got no gradient this time: done all the same
            for leaf, _count in list(self.pending.values()):
                _run_hooks(leaf)

    def before(self, fn: Function, slots: list[np.ndarray | None]) -> tuple[np.ndarray, ...]:
        """The gradients ``fn.backward`` is called on: its outputs' (zeros for an output that got none)."""
        fn.check_saved()
        out_grads = tuple(g if g is not None else np.zeros(s, dt) for g, (s, dt) in zip(slots, fn.out_meta))
        for idx, t in fn.retained.items():
            t.grad = out_grads[idx].copy() if t.grad is None else t.grad + out_grads[idx]
        fn.last_use, self.current = not self.retain_graph, fn
        return out_grads

    def after(self, fn: Function, in_grads: Any) -> tuple[Any, ...]:
        """What ``fn.backward`` returned as one gradient (or None) per input; frees its saved values."""
        fn.last_use, self.current = False, None
        if not self.retain_graph:
            fn.free()
        if not isinstance(in_grads, tuple):
            in_grads = (in_grads,)
        if fn.amp_round is not None:  # recorded under amp.autocast: its gradients are 16-bit numbers too
            in_grads = amp.rounded(in_grads, fn.amp_round)
        if len(in_grads) != len(fn.parents):
            raise RuntimeError(f"{fn!r}.backward returned {len(in_grads)} gradients for {len(fn.parents)} inputs")
        return in_grads

    def to_leaf(self, fn: Function, leaf: Tensor, g: np.ndarray | None) -> None:
        """Add ``fn``'s gradient ``g`` (None: none this time) into ``leaf.grad``; run its hooks after its last."""
        if g is not None:
            accumulate_grad(leaf, _checked(fn, leaf, g), owned=fn.fresh_grads)
        if id(leaf) in self.pending:
            t, left = self.pending[id(leaf)]
            if left > 1:
                self.pending[id(leaf)] = (t, left - 1)
            else:
                del self.pending[id(leaf)]
                _run_hooks(t)


def _run_hooks(leaf: Tensor) -> None:
    for hook in leaf._hooks:
        hook(leaf)
