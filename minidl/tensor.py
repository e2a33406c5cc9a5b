"""Tensor: an ndarray with a gradient, and every operator and method, each a one-line call of its op.

A Tensor wraps an ndarray (``.data``). Each operation is a ``Function`` (minidl/autograd.py) in minidl/ops/,
forward and backward side by side; the methods below only pick the op. When gradients are wanted, the op's
output remembers the Function that made it (``_ctx``), and ``backward()`` walks that graph back.

dtypes: new tensors from Python floats/lists take the default dtype (float32; see ``set_default_dtype``); an
ndarray keeps its dtype. An op on mixed float dtypes follows NumPy's promotion (float32 with float64 gives
float64), and the gradient flowing back to each input is cast to that input's dtype, so a float32 parameter always
gets a float32 ``.grad``. Python scalars in arithmetic take the tensor's dtype (``x32 * 2.0`` stays float32).
Integer and boolean tensors never require grad: ops that output them (argmax, comparisons, casts to int) cut the
graph. Axes are NumPy's ``axis=`` (PyTorch's ``dim=``).
"""

from __future__ import annotations

import numbers
from collections.abc import Callable
from typing import Any

import numpy as np

from minidl import autograd, saved

# re-exported: code written against minidl.tensor keeps working
from minidl.autograd import Function, enable_grad, is_grad_enabled, no_grad, unbroadcast  # noqa: F401

_default_dtype: np.dtype = np.dtype(np.float32)


def set_default_dtype(dtype: Any) -> None:
    """Set the float dtype of new tensors built from Python numbers/lists and of new parameters."""
    global _default_dtype
    dt = np.dtype(dtype)
    if dt.kind != "f":
        raise TypeError(f"set_default_dtype: expected a floating dtype, got {dt}")
    _default_dtype = dt


def get_default_dtype() -> np.dtype:
    return _default_dtype


def _as_array(value: Any, dtype: Any = None) -> np.ndarray:
    """ndarray from a Tensor, ndarray or Python value. Python floats take the default dtype."""
    if isinstance(value, Tensor):
        value = value._data
    if isinstance(value, np.generic):  # a NumPy scalar (what a 0-d op returns) keeps its dtype
        value = np.asarray(value)
    if isinstance(value, np.ndarray):
        if isinstance(value, saved.SavedArray):  # a tensor's array is always a plain ndarray
            value = saved.writable(value) if value.tracked else value.view(np.ndarray)
        return value if dtype is None else value.astype(dtype, copy=False)
    arr = np.asarray(value)
    if dtype is not None:
        return arr.astype(dtype, copy=False)
    if arr.dtype.kind == "f":
        arr = arr.astype(_default_dtype)
    return arr


def _is_float(dtype: np.dtype) -> bool:
    return dtype.kind in "fc"


def _operand(self: Tensor, other: Any) -> Any:
    """Python and NumPy scalars take the tensor's dtype (so float32 * 2 stays float32)."""
    if isinstance(other, Tensor):
        return other
    if isinstance(other, numbers.Number) and self._data.dtype.kind == "f":
        return np.asarray(other, dtype=self._data.dtype)
    return np.asarray(other)


class Tensor:
    """An ndarray with a gradient and a link to the Function that made it.

    Attributes:
        data: the values, an ndarray (see the ``data`` property for writes while a graph holds them).
        grad: an ndarray of ``data``'s shape after backward (leaves, or retain_grad()), else None.
        requires_grad: whether gradients flow to (and through) this tensor.
        name: an optional label, shown in repr and in graph drawings.
    """

    __array_priority__ = 100.0  # ndarray <op> Tensor defers to Tensor's reflected op
    _hooks: tuple[Callable[[Tensor], None], ...] = ()  # post-accumulate-grad hooks (leaves only)

    def __init__(self, data: Any, requires_grad: bool = False, dtype: Any = None, name: str = ""):
        self._data: np.ndarray = _as_array(data, dtype)
        if requires_grad and not _is_float(self._data.dtype):
            raise TypeError(f"only floating-point tensors can require gradients, got dtype {self._data.dtype}")
        self.requires_grad: bool = bool(requires_grad)
        self.grad: np.ndarray | None = None
        self.name = name
        self._ctx: Function | None = None
        self._out_index = 0
        self._retain = False

    # ---- values
    @property
    def data(self) -> np.ndarray:
        """The values. While a recorded op holds them for its backward, a read-only view whose in-place writes
        (``t.data[...] = v``, ``t.data -= v``) are counted, so that backward refuses stale values (minidl/saved.py)."""
        d = self._data
        if saved._held and saved.version_of(d) is not None:
            return saved.SavedArray.of(d)
        return d

    @data.setter
    def data(self, value: Any) -> None:
        if isinstance(value, saved.SavedArray) and value.whole is self._data:
            return  # ``t.data -= x`` hands back t's own array, already written in place
        self._data = _as_array(value)

    @property
    def shape(self) -> tuple[int, ...]:
        return self._data.shape

    @property
    def dtype(self) -> np.dtype:
        return self._data.dtype

    @property
    def ndim(self) -> int:
        return self._data.ndim

    @property
    def size(self) -> int:
        return self._data.size

    @property
    def is_leaf(self) -> bool:
        return self._ctx is None

    def __len__(self) -> int:
        return len(self._data)

    def numpy(self) -> np.ndarray:
        return self.data

    def item(self) -> Any:
        return self._data.item()

    def tolist(self) -> Any:
        return self._data.tolist()

    def __repr__(self) -> str:
        extra = ", requires_grad=True" if self.requires_grad else ""
        label = f", name={self.name!r}" if self.name else ""
        fn = f", grad_fn={self._ctx!r}" if self._ctx is not None else ""
        return f"Tensor({np.array2string(self._data, precision=4, threshold=20)}, dtype={self.dtype}{extra}{fn}{label})"

    def __hash__(self) -> int:
        return id(self)  # by identity: ``==`` compares values elementwise, so it cannot define hashing

    def __bool__(self) -> bool:
        return bool(self._data)

    # ---- graph
    def detach(self) -> Tensor:
        """A new leaf sharing this tensor's data, cut from the graph."""
        return Tensor(self._data)

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

    def register_post_accumulate_grad_hook(self, hook: Callable[[Tensor], None]) -> None:
        """Call ``hook(self)`` once a backward has added its last gradient into this leaf's ``.grad``.

        As PyTorch's hook of the same name; data parallelism uses it to start a bucket's allreduce while
        the backward goes on (``DistributedOptimizer(overlap=True)``).
        """
        if self._ctx is not None:
            raise RuntimeError("register_post_accumulate_grad_hook: only leaf tensors accumulate gradients")
        self._hooks = (*self._hooks, hook)

    def zero_grad(self) -> None:
        self.grad = None

    def backward(self, grad: Any = None, retain_graph: bool = False) -> None:
        """Accumulate d(self)/d(leaf) into every leaf's ``.grad`` by reverse-mode autodiff.

        ``grad`` is the upstream gradient (same shape as self); it may be omitted only for
        a tensor with one element. Gradients add up across calls until zeroed.
        """
        autograd.backward(self, None if grad is None else _as_array(grad, self.dtype), retain_graph)

    # ---- in place: values only, never recorded (for parameters, under no_grad, as PyTorch requires)
    def add_(self, other: Any) -> Tensor:
        return ops.write_in_place("add_", self, np.add, other)

    def sub_(self, other: Any) -> Tensor:
        return ops.write_in_place("sub_", self, np.subtract, other)

    def mul_(self, other: Any) -> Tensor:
        return ops.write_in_place("mul_", self, np.multiply, other)

    def div_(self, other: Any) -> Tensor:
        return ops.write_in_place("div_", self, np.divide, other)

    def copy_(self, src: Any) -> Tensor:
        return ops.write_in_place("copy_", self, None, src)

    def fill_(self, value: Any) -> Tensor:
        return ops.write_in_place("fill_", self, None, value)

    def zero_(self) -> Tensor:
        return ops.write_in_place("zero_", self, None, 0)

    # ---- arithmetic operators
    def __add__(self, other: Any) -> Tensor:
        return ops.Add.apply(self, _operand(self, other))

    def __radd__(self, other: Any) -> Tensor:
        return ops.Add.apply(_operand(self, other), self)

    def __sub__(self, other: Any) -> Tensor:
        return ops.Sub.apply(self, _operand(self, other))

    def __rsub__(self, other: Any) -> Tensor:
        return ops.Sub.apply(_operand(self, other), self)

    def __mul__(self, other: Any) -> Tensor:
        return ops.Mul.apply(self, _operand(self, other))

    def __rmul__(self, other: Any) -> Tensor:
        return ops.Mul.apply(_operand(self, other), self)

    def __truediv__(self, other: Any) -> Tensor:
        return ops.Div.apply(self, _operand(self, other))

    def __rtruediv__(self, other: Any) -> Tensor:
        return ops.Div.apply(_operand(self, other), self)

    def __pow__(self, other: Any) -> Tensor:
        return ops.Pow.apply(self, _operand(self, other))

    def __rpow__(self, other: Any) -> Tensor:
        return ops.Pow.apply(_operand(self, other), self)

    def __matmul__(self, other: Any) -> Tensor:
        return ops.MatMul.apply(self, _operand(self, other))

    def __rmatmul__(self, other: Any) -> Tensor:
        return ops.MatMul.apply(_operand(self, other), self)

    def __neg__(self) -> Tensor:
        return ops.Neg.apply(self)

    def __abs__(self) -> Tensor:
        return ops.Abs.apply(self)

    def __getitem__(self, index: Any) -> Tensor:
        return ops.GetItem.apply(self, index=ops.index_arg(index))

    # ---- comparisons: elementwise, boolean tensors without gradient (as PyTorch and NumPy)
    def __eq__(self, other: Any) -> Tensor:  # type: ignore[override]
        return ops.eq(self, other)

    def __ne__(self, other: Any) -> Tensor:  # type: ignore[override]
        return ops.ne(self, other)

    def __lt__(self, other: Any) -> Tensor:
        return ops.lt(self, other)

    def __le__(self, other: Any) -> Tensor:
        return ops.le(self, other)

    def __gt__(self, other: Any) -> Tensor:
        return ops.gt(self, other)

    def __ge__(self, other: Any) -> Tensor:
        return ops.ge(self, other)

    # ---- reductions and scans (axis: int, tuple or None for all)
    def sum(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.Sum.apply(self, axis=axis, keepdims=keepdims)

    def mean(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.Mean.apply(self, axis=axis, keepdims=keepdims)

    def max(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        """The largest values (not indices: see argmax); tied elements share the gradient."""
        return ops.Max.apply(self, axis=axis, keepdims=keepdims)

    def min(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.Min.apply(self, axis=axis, keepdims=keepdims)

    def var(self, axis: Any = None, unbiased: bool | None = None, keepdims: bool = False, correction: Any = None):
        """Variance, divided by n - correction (default 1, the unbiased estimate, as torch.var)."""
        return ops.var(self, axis, unbiased, keepdims, correction)

    def std(self, axis: Any = None, unbiased: bool | None = None, keepdims: bool = False, correction: Any = None):
        return ops.std(self, axis, unbiased, keepdims, correction)

    def logsumexp(self, axis: Any = None, keepdims: bool = False) -> Tensor:
        return ops.LogSumExp.apply(self, axis=axis, keepdims=keepdims)

    def cumsum(self, axis: int) -> Tensor:
        return ops.Cumsum.apply(self, axis=axis)

    def argmax(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return ops.argmax(self, axis, keepdims)

    def argmin(self, axis: int | None = None, keepdims: bool = False) -> Tensor:
        return ops.argmin(self, axis, keepdims)

    # ---- shape
    def reshape(self, *shape: Any) -> Tensor:
        return ops.reshape(self, *shape)

    view = reshape

    def transpose(self, *axes: Any) -> Tensor:
        """NumPy's transpose: a permutation of all axes (none: reversed), not PyTorch's swap of two."""
        return ops.transpose(self, *axes)

    permute = transpose

    @property
    def T(self) -> Tensor:
        return ops.Transpose.apply(self)

    def expand(self, *shape: Any) -> Tensor:
        return ops.broadcast_to(self, *shape)

    broadcast_to = expand

    def squeeze(self, axis: Any = None) -> Tensor:
        return ops.squeeze(self, axis)

    def unsqueeze(self, axis: int) -> Tensor:
        return ops.unsqueeze(self, axis)

    def flatten(self, start_axis: int = 0, end_axis: int = -1) -> Tensor:
        return ops.flatten(self, start_axis, end_axis)

    def split(self, sections: Any, axis: int = 0) -> tuple[Tensor, ...]:
        """NumPy's split: ``sections`` is a NUMBER of equal parts or a list of cut indices."""
        return ops.Split.apply(self, sections=sections, axis=axis)

    def flip(self, axis: Any = None) -> Tensor:
        return ops.Flip.apply(self, axes=axis)

    def tril(self, k: int = 0) -> Tensor:
        return ops.tril(self, k)

    def triu(self, k: int = 0) -> Tensor:
        return ops.triu(self, k)

    def astype(self, dtype: Any) -> Tensor:
        return ops.Cast.apply(self, dtype=np.dtype(dtype))

    # ---- elementwise math
    def exp(self) -> Tensor:
        return ops.Exp.apply(self)

    def log(self) -> Tensor:
        return ops.Log.apply(self)

    def log2(self) -> Tensor:
        return ops.Log2.apply(self)

    def sqrt(self) -> Tensor:
        return ops.Sqrt.apply(self)

    def sin(self) -> Tensor:
        return ops.Sin.apply(self)

    def cos(self) -> Tensor:
        return ops.Cos.apply(self)

    def tan(self) -> Tensor:
        return ops.Tan.apply(self)

    def abs(self) -> Tensor:
        return ops.Abs.apply(self)

    def sign(self) -> Tensor:
        return ops.Sign.apply(self)

    def floor(self) -> Tensor:
        return ops.Floor.apply(self)

    def ceil(self) -> Tensor:
        return ops.Ceil.apply(self)

    def clip(self, lo: Any = None, hi: Any = None) -> Tensor:
        """Clamp to [lo, hi] (None: unbounded); bounds may be Tensors, which then get gradients too."""
        return ops.clip(self, lo, hi)

    clamp = clip

    # ---- activations and softmax
    def relu(self) -> Tensor:
        return ops.ReLU.apply(self)

    def tanh(self) -> Tensor:
        return ops.Tanh.apply(self)

    def sigmoid(self) -> Tensor:
        return ops.Sigmoid.apply(self)

    def softmax(self, axis: Any = -1) -> Tensor:
        return ops.Softmax.apply(self, axis=axis)

    def log_softmax(self, axis: Any = -1) -> Tensor:
        return ops.LogSoftmax.apply(self, axis=axis)


def tensor(data: Any, requires_grad: bool = False, dtype: Any = None, name: str = "") -> Tensor:
    """Build a Tensor. Python floats/lists take the default dtype (float32 unless changed);
    an ndarray keeps its dtype unless ``dtype`` is given (as torch.tensor does)."""
    if isinstance(data, Tensor):
        data = data._data
    return Tensor(np.array(_as_array(data, dtype), copy=True), requires_grad=requires_grad, name=name)


autograd.use_tensor_class(Tensor)

# The one import circle of the package: the ops build Tensors, and Tensor's methods call the ops. Imported last,
# once Tensor exists, so either module may be imported first.
from minidl import ops  # noqa: E402
