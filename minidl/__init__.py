"""minidl: a pure-NumPy reference implementation of deep learning on CPU clusters."""

from minidl import ops  # noqa: F401  (installs Tensor operators and methods)
from minidl.gradcheck import GradcheckError, gradcheck, numerical_grad
from minidl.ops import (
    abs,
    broadcast_to,
    cat,
    clip,
    concatenate,
    log_softmax,
    logsumexp,
    maximum,
    minimum,
    pad,
    softmax,
    split,
    stack,
    where,
)
from minidl.random import default_generator, manual_seed
from minidl.serialization import CheckpointError, load, save
from minidl.tensor import (
    Function,
    Tensor,
    enable_grad,
    get_default_dtype,
    is_grad_enabled,
    no_grad,
    ones,
    randn,
    set_default_dtype,
    tensor,
    unbroadcast,
    zeros,
)

__version__ = "0.1.0"

__all__ = [
    "Function",
    "GradcheckError",
    "Tensor",
    "enable_grad",
    "get_default_dtype",
    "gradcheck",
    "is_grad_enabled",
    "no_grad",
    "numerical_grad",
    "ones",
    "randn",
    "set_default_dtype",
    "tensor",
    "unbroadcast",
    "zeros",
    "CheckpointError",
    "load",
    "save",
    "default_generator",
    "manual_seed",
    "abs",
    "broadcast_to",
    "cat",
    "clip",
    "concatenate",
    "log_softmax",
    "logsumexp",
    "maximum",
    "minimum",
    "pad",
    "softmax",
    "split",
    "stack",
    "where",
]
