"""minidl: a pure-NumPy reference implementation of deep learning on CPU clusters."""

from minidl import startup  # noqa: F401  first: python -m minidl.train's Ctrl-C in its imports is one line
from minidl.autograd import Function, enable_grad, is_grad_enabled, no_grad, unbroadcast
from minidl.creation import arange, eye, full, full_like, ones, ones_like, randn, zeros, zeros_like
from minidl.gradcheck import GradcheckError, gradcheck, numerical_grad
from minidl.ops import (
    abs,
    amax,
    amin,
    argmax,
    argmin,
    broadcast_to,
    cat,
    ceil,
    clamp,
    clip,
    concatenate,
    cos,
    cumsum,
    eq,
    exp,
    flatten,
    flip,
    floor,
    ge,
    gt,
    le,
    log,
    log2,
    log_softmax,
    logsumexp,
    lt,
    matmul,
    maximum,
    mean,
    minimum,
    ne,
    pad,
    reshape,
    sigmoid,
    sign,
    sin,
    softmax,
    split,
    sqrt,
    squeeze,
    stack,
    std,
    sum,
    tan,
    tanh,
    transpose,
    tril,
    triu,
    unsqueeze,
    var,
    where,
)
from minidl.random import default_generator, manual_seed
from minidl.serialization import CheckpointError, load, save
from minidl.tensor import Tensor, get_default_dtype, set_default_dtype, tensor
from minidl.tools.memory import tune_malloc

__version__ = "0.1.0"

tune_malloc()  # glibc keeps freed arrays for the next step (minidl/tools/memory.py)

__all__ = [
    "CheckpointError", "Function", "GradcheckError", "Tensor", "default_generator", "enable_grad",
    "get_default_dtype", "gradcheck", "is_grad_enabled", "load", "manual_seed", "no_grad", "numerical_grad", "save",
    "set_default_dtype", "tensor", "unbroadcast",
    # factories
    "arange", "eye", "full", "full_like", "ones", "ones_like", "randn", "zeros", "zeros_like",
    # functional forms of the ops
    "abs", "amax", "amin", "argmax", "argmin", "broadcast_to", "cat", "ceil", "clamp", "clip", "concatenate", "cos",
    "cumsum", "eq", "exp", "flatten", "flip", "floor", "ge", "gt", "le", "log", "log2", "log_softmax", "logsumexp",
    "lt", "matmul", "maximum", "mean", "minimum", "ne", "pad", "reshape", "sigmoid", "sign", "sin", "softmax",
    "split", "sqrt", "squeeze", "stack", "std", "sum", "tan", "tanh", "transpose", "tril", "triu", "unsqueeze", "var",
    "where",
]  # fmt: skip
