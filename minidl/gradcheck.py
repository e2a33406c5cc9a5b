"""Finite-difference gradient checking, a public tool (in the style of Chainer's ``gradient_check``).

For ``fn`` mapping tensors to a tensor y, reverse mode gives the gradient of the scalar

    L(x_1, ..., x_k) = sum(fn(x_1, ..., x_k) * R)

for a fixed random R of y's shape (so a non-scalar output is checked in every component at
once). The central difference

    dL/dx[i] ~ (L(x + eps e_i) - L(x - eps e_i)) / (2 eps)        error O(eps^2 f''') + O(u |L| / eps)

approximates the same numbers. ``gradcheck`` compares them in float64 in two ways:

(a) along one random unit direction d per input: <dL/dx, d> against (L(x + eps d) - L(x - eps d)) / (2 eps),
    two evaluations of fn per input, so it works for inputs of any size;
(b) per element, when the inputs hold at most ``max_elementwise`` elements in total, so a
    failure names the exact index.

Both compare as ``np.isclose`` does: |analytic - numeric| <= atol + rtol * |numeric|.
``fn`` must be deterministic (re-seed any randomness inside it) and the inputs away from
kinks (relu at 0, ties in max): a difference quotient across a kink is meaningless.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from minidl.tensor import Tensor, get_default_dtype, no_grad, set_default_dtype

__all__ = ["GradcheckError", "gradcheck", "numerical_grad"]


class GradcheckError(AssertionError):
    """Analytic and numerical gradients disagree. Attributes name where."""

    def __init__(self, message: str, *, input_index: int, input_name: str, index: Any, analytic: float, numeric: float):
        super().__init__(message)
        self.input_index, self.input_name, self.index = input_index, input_name, index
        self.analytic, self.numeric = analytic, numeric


def _is_float_input(x: Any) -> bool:
    if isinstance(x, Tensor):
        return x.dtype.kind == "f"
    if isinstance(x, np.ndarray | np.generic):
        return x.dtype.kind == "f"
    if isinstance(x, list | tuple):
        return np.asarray(x).dtype.kind == "f"
    return False  # Python numbers, strings, None, integer arrays: constants


def _name(x: Any, i: int) -> str:
    return x.name if isinstance(x, Tensor) and x.name else f"input {i}"


def _as_float64(x: Any) -> np.ndarray:
    """float64 values of an input; an existing float64 ndarray keeps its layout (strided views stay strided)."""
    arr = x.data if isinstance(x, Tensor) else x
    return arr if isinstance(arr, np.ndarray) and arr.dtype == np.float64 else np.asarray(arr, dtype=np.float64)


def _outputs(y: Any) -> tuple[Tensor, ...]:
    ys = y if isinstance(y, tuple | list) else (y,)
    for t in ys:
        if not isinstance(t, Tensor):
            raise TypeError(f"gradcheck: fn must return a Tensor (or a tuple of Tensors), got {type(t).__name__}")
    return tuple(ys)


class _Problem:
    """fn, its inputs split into checked (float64 arrays) and constants, and the fixed weights R."""

    def __init__(self, fn: Callable[..., Any], inputs: Sequence[Any], wrt: Sequence[int] | None, seed: int):
        self.fn, self.inputs = fn, list(inputs)
        floats = [i for i, x in enumerate(self.inputs) if _is_float_input(x)]
        if wrt is None:
            self.checked = floats
        else:
            self.checked = [int(i) % len(self.inputs) for i in wrt]
            bad = [i for i in self.checked if i not in floats]
            if bad:
                raise TypeError(f"gradcheck: wrt names non-float input(s) {bad}; only float inputs have gradients")
        self.values = {i: _as_float64(self.inputs[i]) for i in self.checked}
        self.names = {i: _name(self.inputs[i], i) for i in self.checked}
        self.rng, self.seed, self.eps = np.random.default_rng(seed), seed, 1e-6  # gradcheck sets its eps
        with no_grad():
            ys = _outputs(self.call(self.values, grad=False))
        self.weights = [self.rng.standard_normal(y.shape) for y in ys]

    def call(self, values: dict[int, np.ndarray], grad: bool) -> Any:
        args = [
            Tensor(values[i], requires_grad=grad, name=self.names[i]) if i in values else x
            for i, x in enumerate(self.inputs)
        ]
        self.last_args = args
        return self.fn(*args)

    def loss(self, values: dict[int, np.ndarray]) -> float:
        """L = sum_k sum(y_k * R_k), evaluated without a graph."""
        with no_grad():
            ys = _outputs(self.call(values, grad=False))
        return float(sum(np.sum(y.data.astype(np.float64) * r) for y, r in zip(ys, self.weights)))

    def analytic(self) -> dict[int, np.ndarray]:
        """dL/dx for every checked input, by one backward pass per output."""
        ys = _outputs(self.call(self.values, grad=True))
        args = self.last_args
        for y, r in zip(ys, self.weights):
            if y.shape != r.shape:
                raise RuntimeError(f"gradcheck: fn is not deterministic: output shape {y.shape}, before {r.shape}")
            if y.requires_grad:
                y.backward(r.astype(y.dtype), retain_graph=True)
        grads = {}
        for i in self.checked:
            g = args[i].grad
            if g is None:
                g = np.zeros(args[i].shape)
            if g.shape != args[i].shape:
                raise GradcheckError(
                    f"gradcheck: gradient of {_describe(self.names[i], i)} has shape {g.shape}, "
                    f"the input has shape {args[i].shape}",
                    input_index=i,
                    input_name=self.names[i],
                    index=None,
                    analytic=np.nan,
                    numeric=np.nan,
                )
            grads[i] = np.asarray(g, dtype=np.float64)
        return grads

    def central_difference(self, i: int, step: np.ndarray, eps: float) -> float:
        """(L(x_i + eps step) - L(x_i - eps step)) / (2 eps), other inputs fixed."""
        x = self.values[i]
        plus = self.loss({**self.values, i: x + eps * step})
        minus = self.loss({**self.values, i: x - eps * step})
        return (plus - minus) / (2 * eps)

    def per_output(self, i: int, step: np.ndarray, eps: float) -> list[tuple[float, float]]:
        """(analytic, numeric) of each output's own term sum(y_k * R_k) of L along ``step`` of input i: which of
        fn's outputs carries a disagreement (one backward pass and two evaluations per output)."""
        x, pairs = self.values[i], []
        for k, r in enumerate(self.weights):
            ys = _outputs(self.call(self.values, grad=True))
            if ys[k].requires_grad:
                ys[k].backward(r.astype(ys[k].dtype))
            g = self.last_args[i].grad
            analytic = 0.0 if g is None else float(np.sum(np.asarray(g, dtype=np.float64) * step))
            with no_grad():
                plus, minus = (
                    _outputs(self.call({**self.values, i: x + sign * eps * step}, grad=False))[k] for sign in (1, -1)
                )
            numeric = float(np.sum((plus.data.astype(np.float64) - minus.data.astype(np.float64)) * r)) / (2 * eps)
            pairs.append((analytic, numeric))
        return pairs


def _mismatch(
    p: _Problem, i: int, index: Any, analytic: float, numeric: float, atol: float, rtol: float, what: str, step: Any
) -> GradcheckError:
    """The error: which input (and index) and which of fn's outputs disagree, with the weights that were used."""
    pairs = p.per_output(i, step, p.eps)
    wrong = [k for k, (a, n) in enumerate(pairs) if not _close(a, n, atol, rtol)] or list(range(len(pairs)))
    shapes = [w.shape for w in p.weights]
    if len(pairs) == 1:
        through = f"fn's output (shape {shapes[0]})"
    else:
        through = f"fn's output {' and '.join(f'{k} (shape {shapes[k]})' for k in wrong)} of {len(pairs)}"
    msg = (
        f"gradcheck failed for {_describe(p.names[i], i)}, shape {p.values[i].shape}, {what}, through {through}: "
        f"analytic {analytic:.10g}, numeric {numeric:.10g}, difference {abs(analytic - numeric):.3g} "
        f"> atol {atol:g} + rtol {rtol:g} * |numeric|; gradcheck weights each output with random numbers R "
        f"(standard normal, seed {p.seed}) and compares the derivatives of sum(output * R): these numbers are that "
        "weighted sum's, not the output's own"
    )
    return GradcheckError(msg, input_index=i, input_name=p.names[i], index=index, analytic=analytic, numeric=numeric)


def _describe(name: str, i: int) -> str:
    return name if name == f"input {i}" else f"{name!r} (input {i})"


def _close(a: float, n: float, atol: float, rtol: float) -> bool:
    return abs(a - n) <= atol + rtol * abs(n)


def gradcheck(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    eps: float = 1e-6,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    seed: int = 0,
    max_elementwise: int = 2000,
    wrt: Sequence[int] | None = None,
) -> bool:
    """Check the backward of ``fn`` against central differences, in float64.

    Args:
        fn: takes one argument per input (Tensors for the float ones) and returns a Tensor or a tuple of Tensors.
        inputs: Tensors, ndarrays, NumPy scalars, lists or constants. Float ones become float64 leaf Tensors and
            are checked (or only those listed in ``wrt``); others (integer index arrays, Python numbers, None)
            are passed through untouched, as constants.
        eps: the finite-difference step.
        atol, rtol: tolerance, as in ``np.isclose``.
        seed: seeds the output weights R and the random directions.
        max_elementwise: check every element when the checked inputs hold at most this many in total.
        wrt: positions of the inputs to check (default: every float input).

    Returns True, or raises ``GradcheckError`` naming the input (position and name), the index and the
    analytic and numeric values. During the check the default dtype is float64, so tensors that fn
    builds from Python numbers are float64 as well.
    """
    previous = get_default_dtype()
    set_default_dtype(np.float64)
    try:
        p = _Problem(fn, inputs, wrt, seed)
        p.eps = eps  # a failure's search for the output that disagrees steps as the check did
        grads = p.analytic()
        # (a) one random direction per input: cheap at any size.
        failure = None
        for i in p.checked:
            if p.values[i].size == 0:
                continue  # no elements, nothing to check (fn's outputs may still be NaN, e.g. a mean over nothing)
            d = p.rng.standard_normal(p.values[i].shape)
            d /= max(float(np.linalg.norm(d)), 1e-300)
            numeric = p.central_difference(i, d, eps)
            analytic = float(np.sum(grads[i] * d))
            if failure is None and not _close(analytic, numeric, atol, rtol):
                failure = _mismatch(p, i, "direction", analytic, numeric, atol, rtol, "along a random direction", d)
        # (b) every element, for small inputs: a failure then names the exact index.
        if sum(p.values[i].size for i in p.checked) <= max_elementwise:
            for i in p.checked:
                x = p.values[i]
                for index in np.ndindex(*x.shape):
                    e = np.zeros(x.shape)
                    e[index] = 1.0
                    numeric = p.central_difference(i, e, eps)
                    analytic = float(grads[i][index])
                    if not _close(analytic, numeric, atol, rtol):
                        raise _mismatch(p, i, index, analytic, numeric, atol, rtol, f"at index {index}", e)
        if failure is not None:
            raise failure
        return True
    finally:
        set_default_dtype(previous)


def numerical_grad(
    fn: Callable[..., Any],
    inputs: Sequence[Any],
    grad_output: Any = None,
    eps: float = 1e-6,
) -> list[np.ndarray | None]:
    """Central-difference gradient of sum(fn(*inputs) * grad_output) w.r.t. each float input, in float64.

    ``grad_output`` defaults to ones (so a scalar fn gives its plain gradient); for an fn returning a tuple,
    pass a tuple of arrays. Returns one array per input of its shape, None for non-float inputs.
    """
    previous = get_default_dtype()
    set_default_dtype(np.float64)
    try:
        p = _Problem(fn, inputs, None, seed=0)
        if grad_output is not None:
            gos = grad_output if isinstance(grad_output, tuple | list) else (grad_output,)
            p.weights = [np.broadcast_to(np.asarray(g, dtype=np.float64), r.shape) for g, r in zip(gos, p.weights)]
        else:
            p.weights = [np.ones_like(r) for r in p.weights]
        result: list[np.ndarray | None] = [None] * len(p.inputs)
        for i in p.checked:
            x = p.values[i]
            g = np.zeros(x.shape)
            for index in np.ndindex(*x.shape):
                e = np.zeros(x.shape)
                e[index] = 1.0
                g[index] = p.central_difference(i, e, eps)
            result[i] = g
        return result
    finally:
        set_default_dtype(previous)
