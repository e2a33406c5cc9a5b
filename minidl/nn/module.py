"""Module and Parameter: the containers layers are built from (PyTorch's names and semantics)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

import numpy as np

from minidl.tensor import Tensor, get_default_dtype


class StateDictError(KeyError, ValueError):
    """A state dict that does not fit the module: missing or unexpected keys, or a shape that differs.

    A KeyError (as a missing key is) and a ValueError (as a wrong shape is); printed as plain text.
    """

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


class Parameter(Tensor):
    """A leaf tensor that a Module registers and an optimizer updates (requires_grad=True)."""

    def __init__(self, data: Any, requires_grad: bool = True, dtype: Any = None):
        if isinstance(data, Tensor):
            data = data.data
        arr = np.asarray(data)
        if dtype is None and arr.dtype.kind != "f":
            dtype = get_default_dtype()
        super().__init__(np.array(arr, dtype=dtype, copy=True), requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()


class Module:
    """Base class of every layer and model.

    Assigning a Parameter, a Module or a buffer (``register_buffer``) as an attribute
    registers it under that name; ``named_parameters()`` and ``state_dict()`` walk the
    tree with dotted names (``layers.0.weight``), in registration order.
    """

    def __init__(self) -> None:
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_modules", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "training", True)

    # -- registration
    def __setattr__(self, name: str, value: Any) -> None:
        if "_parameters" not in self.__dict__:
            raise RuntimeError(f"{type(self).__name__}: call Module.__init__() before assigning attributes")
        for store in (self._parameters, self._modules, self._buffers):
            store.pop(name, None)
        if isinstance(value, Parameter):
            self._parameters[name] = value
        elif isinstance(value, Module):
            self._modules[name] = value
        object.__setattr__(self, name, value)

    def __delattr__(self, name: str) -> None:
        for store in (self._parameters, self._modules, self._buffers):
            store.pop(name, None)
        object.__delattr__(self, name)

    def register_parameter(self, name: str, param: Parameter | None) -> None:
        if param is None:
            object.__setattr__(self, name, None)
            self._parameters.pop(name, None)
        else:
            setattr(self, name, param)

    def register_buffer(self, name: str, value: np.ndarray | None) -> None:
        """A non-trained array saved in state_dict (e.g. BatchNorm's running mean)."""
        self._buffers[name] = value
        object.__setattr__(self, name, value)

    def add_module(self, name: str, module: Module | None) -> None:
        setattr(self, name, module)

    # -- traversal
    def named_modules(self, prefix: str = "") -> Iterator[tuple[str, Module]]:
        stack = [(prefix, self)]
        while stack:
            name, mod = stack.pop()
            yield name, mod
            children = [(f"{name}.{k}" if name else k, m) for k, m in mod._modules.items() if m is not None]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, m in self.named_modules():
            yield m

    def children(self) -> Iterator[Module]:
        yield from (m for m in self._modules.values() if m is not None)

    def named_parameters(self, prefix: str = "") -> Iterator[tuple[str, Parameter]]:
        seen: set[int] = set()
        for mname, mod in self.named_modules(prefix):
            for pname, p in mod._parameters.items():
                if p is not None and id(p) not in seen:
                    seen.add(id(p))
                    yield (f"{mname}.{pname}" if mname else pname), p

    def parameters(self) -> Iterator[Parameter]:
        for _, p in self.named_parameters():
            yield p

    def named_buffers(self) -> Iterator[tuple[str, np.ndarray]]:
        for mname, mod in self.named_modules():
            for bname, b in mod._buffers.items():
                if b is not None:
                    yield (f"{mname}.{bname}" if mname else bname), b

    # -- modes and gradients
    def train(self, mode: bool = True) -> Module:
        for m in self.modules():
            object.__setattr__(m, "training", mode)
        return self

    def eval(self) -> Module:
        return self.train(False)

    def zero_grad(self) -> None:
        for p in self.parameters():
            p.grad = None

    # -- state
    def state_dict(self) -> OrderedDict[str, np.ndarray]:
        """Dotted name -> ndarray (a copy) for every parameter and buffer."""
        out: OrderedDict[str, np.ndarray] = OrderedDict()
        for mname, mod in self.named_modules():
            for pname, p in mod._parameters.items():
                if p is not None:
                    out[f"{mname}.{pname}" if mname else pname] = p.data.copy()
            for bname, b in mod._buffers.items():
                if b is not None:
                    out[f"{mname}.{bname}" if mname else bname] = np.array(b, copy=True)
        return out

    def load_state_dict(self, state: dict[str, Any], strict: bool = True, cast: bool = False) -> None:
        """Copy arrays into parameters and buffers by name; shapes and dtypes must match.

        Everything is checked before anything is written, so a state that does not fit leaves the
        module as it was. With ``strict`` (the default), missing and unexpected keys are an error
        naming them; an array of another dtype is refused unless ``cast=True`` (then it is converted
        to the module's dtype, as PyTorch's ``copy_`` does).
        """
        own = self._state_slots()
        errors = []
        if strict:
            missing = [k for k in own if k not in state]
            unexpected = [k for k in state if k not in own]
            if missing:
                errors.append(f"missing keys: {missing}")
            if unexpected:
                errors.append(f"unexpected keys: {unexpected}")
        values = {}
        for k, (mod, name, kind) in own.items():
            if k not in state:
                continue
            value = np.asarray(state[k].data if isinstance(state[k], Tensor) else state[k])
            current = mod._parameters[name].data if kind == "param" else np.asarray(mod._buffers[name])
            if value.shape != current.shape:
                errors.append(f"shape mismatch for {k}: checkpoint {value.shape}, model {current.shape}")
            elif value.dtype != current.dtype and not cast:
                errors.append(
                    f"dtype mismatch for {k}: checkpoint {value.dtype}, model {current.dtype} (cast=True converts)"
                )
            else:
                values[k] = value.astype(current.dtype, copy=True)
        if errors:
            raise StateDictError(f"load_state_dict for {type(self).__name__}: " + "; ".join(errors))
        for k, value in values.items():
            mod, name, kind = own[k]
            if kind == "param":
                mod._parameters[name].data = value
            else:
                mod.register_buffer(name, value)

    def _state_slots(self) -> dict[str, tuple[Module, str, str]]:
        """Dotted name -> (owning module, attribute name, "param" or "buffer") for every state_dict entry."""
        own: dict[str, tuple[Module, str, str]] = {}
        for mname, mod in self.named_modules():
            for kind, store in (("param", mod._parameters), ("buffer", mod._buffers)):
                for k, v in store.items():
                    if v is not None:
                        own[f"{mname}.{k}" if mname else k] = (mod, k, kind)
        return own

    # -- calling
    def forward(self, *args: Any, **kwargs: Any) -> Any:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} has no forward()")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.forward(*args, **kwargs)

    def extra_repr(self) -> str:
        return ""

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__}({self.extra_repr()}"]
        for name, m in self._modules.items():
            sub = repr(m).replace("\n", "\n  ")
            lines.append(f"  ({name}): {sub}")
        return lines[0] + ")" if len(lines) == 1 else "\n".join(lines) + "\n)"
