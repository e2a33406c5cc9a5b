"""The primitive differentiable ops and their functional forms (``minidl.exp``, ``minidl.where``, ...).

Each op is a ``Function`` subclass (minidl/autograd.py) with forward and backward side by side, and its
functional form right after it; the files group them by family: arithmetic (elementwise), one-input math
(unary), activations, picking (select: maximum, where, clamp), reductions and scans, shapes, softmax,
comparisons (no gradient), linear algebra, and the fused losses. Tensor's methods (minidl/tensor.py) call them.
"""

from __future__ import annotations

from minidl.ops import activation as _activation
from minidl.ops.activation import *  # noqa: F403  (relu, gelu, ...: ops/activation.py's __all__)
from minidl.ops.activation import (
    ELU,
    GELU,
    Hardswish,
    LeakyReLU,
    Mish,
    ReLU,
    ReLU6,
    Sigmoid,
    SiLU,
    Softplus,
    Softsign,
    Tanh,
)
from minidl.ops.compare import argmax, argmin, eq, ge, gt, le, lt, ne
from minidl.ops.elementwise import Add, Cast, Div, Mul, Neg, Pow, Sub, add, div, mul, pow, sub
from minidl.ops.inplace import write_in_place
from minidl.ops.linalg import MatMul, matmul
from minidl.ops.loss import BinaryCrossEntropyWithLogits, CrossEntropy
from minidl.ops.reduce import Cumsum, Max, Mean, Min, Std, Sum, Var, amax, amin, cumsum, mean, std, sum, var
from minidl.ops.select import ClampTensor, Clip, Maximum, Minimum, Where, clamp, clip, maximum, minimum, where
from minidl.ops.shape import (
    Concatenate,
    Expand,
    Flip,
    GetItem,
    Pad,
    Reshape,
    Split,
    Stack,
    Transpose,
    Triangle,
    broadcast_to,
    cat,
    concatenate,
    flatten,
    flip,
    index_arg,
    pad,
    reshape,
    shape_arg,
    split,
    squeeze,
    stack,
    transpose,
    tril,
    triu,
    unsqueeze,
)
from minidl.ops.softmax import LogSoftmax, LogSumExp, Softmax, log_softmax, logsumexp, softmax
from minidl.ops.unary import (
    Abs,
    Ceil,
    Cos,
    Exp,
    Floor,
    Log,
    Log2,
    Sign,
    Sin,
    Sqrt,
    Tan,
    abs,
    ceil,
    cos,
    exp,
    floor,
    log,
    log2,
    sign,
    sin,
    sqrt,
    tan,
)

__all__ = [
    # Functions (the ops)
    "Abs", "Add", "BinaryCrossEntropyWithLogits", "Cast", "Ceil", "ClampTensor", "Clip", "Concatenate", "Cos",
    "CrossEntropy", "Cumsum", "Div", "ELU", "Exp", "Expand", "Flip", "Floor", "GELU", "GetItem", "Hardswish",
    "LeakyReLU", "Log", "Log2", "LogSoftmax", "LogSumExp", "MatMul", "Max", "Maximum", "Mean", "Min", "Minimum",
    "Mish", "Mul", "Neg", "Pad", "Pow", "ReLU", "ReLU6", "Reshape", "SiLU", "Sigmoid", "Sign", "Sin", "Softmax", "Softplus", "Softsign",
    "Split", "Sqrt", "Stack", "Std", "Sub", "Sum", "Tan", "Tanh", "Transpose", "Triangle", "Var", "Where",
    # functional forms (and the activations', ops/activation.py's __all__)
    *_activation.__all__,
    "abs", "add", "amax", "amin", "argmax", "argmin", "broadcast_to", "cat", "ceil", "clamp", "clip", "concatenate",
    "cos", "cumsum", "div", "eq", "exp", "flatten", "flip", "floor", "ge", "gt",
    "index_arg", "le", "log", "log2", "log_softmax", "logsumexp", "lt", "matmul", "maximum", "mean",
    "minimum", "mul", "ne", "pad", "pow", "reshape", "shape_arg", "sign", "sin",
    "softmax", "split", "sqrt", "squeeze", "stack", "std", "sub", "sum", "tan", "transpose", "tril",
    "triu", "unsqueeze", "var", "where", "write_in_place",
]  # fmt: skip
