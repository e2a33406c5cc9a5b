"""Optimizer: the base class of SGD, Adam, AdamW and LARS (PyTorch's interface and state layout).

An optimizer holds ``param_groups``, a list of dicts, each with ``"params"`` (a list of Parameters)
and that group's hyperparameters (``"lr"``, ``"momentum"``, ...), and ``state``, a dict
Parameter -> dict of per-parameter buffers (momentum, Adam's moments, the step count).
``step()`` reads each ``p.grad`` (an ndarray, or None to skip) and updates ``p.data`` in place,
so an update never builds an autograd graph.

``state_dict()`` follows PyTorch's layout, with plain arrays and numbers only, so
``minidl.save`` can write it to an .npz::

    {"state": {0: {"step": 3, "exp_avg": ndarray, ...}, 1: {...}},      # keyed by parameter index
     "param_groups": [{"lr": 0.1, "momentum": 0.9, ..., "params": [0, 1]}, ...]}

Parameters are numbered in order across groups (group 0's first, then group 1's, ...), so a
checkpoint loads into a fresh optimizer built the same way over a fresh model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np

from minidl.tensor import Tensor, enable_grad

ParamsT = Iterable[Tensor] | Iterable[dict[str, Any]]


class Optimizer:
    """Base class: parameter groups, per-parameter state, zero_grad, state_dict.

    Subclasses implement ``_update_group(group)``, the update of one parameter group, and may
    override ``_check_group(group)`` to validate their hyperparameters.

    Args:
        params: an iterable of Parameters, or of dicts ``{"params": [...], "lr": ..., ...}``
            (parameter groups; a key missing from a group takes its value from ``defaults``).
        defaults: the default hyperparameters; a value of ``REQUIRED`` must be given by every group.
    """

    def __init__(self, params: ParamsT, defaults: dict[str, Any]):
        if isinstance(params, Tensor):
            raise TypeError(
                f"{type(self).__name__}: params must be an iterable of Parameters or of dicts, got a single "
                "Tensor; wrap it in a list: [param]"
            )
        if isinstance(params, dict):
            raise TypeError(f"{type(self).__name__}: params must be an iterable of Parameters or dicts, got one dict")
        self.defaults: dict[str, Any] = dict(defaults)
        self.state: dict[Tensor, dict[str, Any]] = {}
        self.param_groups: list[dict[str, Any]] = []
        groups = list(params)
        if not groups:
            raise ValueError(f"{type(self).__name__} got an empty parameter list")
        if not isinstance(groups[0], dict):
            groups = [{"params": groups}]
        for group in groups:
            self.add_param_group(group)

    # -- groups
    def add_param_group(self, group: dict[str, Any]) -> None:
        """Add a group of parameters (with its own hyperparameters) to optimize."""
        if not isinstance(group, dict):
            raise TypeError(f"{type(self).__name__}: a parameter group must be a dict, got {type(group).__name__}")
        params = group.get("params")
        if params is None:
            raise ValueError(f"{type(self).__name__}: a parameter group needs a 'params' entry")
        params = [params] if isinstance(params, Tensor) else list(params)
        if not params:
            raise ValueError(f"{type(self).__name__}: parameter group {len(self.param_groups)} is empty")
        for i, p in enumerate(params):
            if not isinstance(p, Tensor):
                raise TypeError(
                    f"{type(self).__name__}: can only optimize Tensors/Parameters, but parameter {i} of group "
                    f"{len(self.param_groups)} is a {type(p).__name__}"
                )
            if not p.is_leaf:
                raise ValueError(f"{type(self).__name__}: can't optimize a non-leaf Tensor (parameter {i})")
            if p.dtype.kind != "f":
                raise TypeError(f"{type(self).__name__}: parameter {i} has dtype {p.dtype}; it must be floating-point")
        seen = {id(p) for g in self.param_groups for p in g["params"]}
        if len({id(p) for p in params}) != len(params) or any(id(p) in seen for p in params):
            raise ValueError(f"{type(self).__name__}: some parameters appear more than once (in one or several groups)")

        full = {k: v for k, v in group.items() if k != "params"}
        for name, default in self.defaults.items():
            if name not in full:
                if default is REQUIRED:
                    raise ValueError(f"{type(self).__name__}: parameter group didn't specify a value of '{name}'")
                full[name] = default
        self._check_group(full)
        full["params"] = params
        self.param_groups.append(full)

    def _check_group(self, group: dict[str, Any]) -> None:
        """Validate (and normalize) one group's hyperparameters; raise ValueError naming the bad one."""
        check_nonnegative(self, group, "lr")

    # -- the update
    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        """Update every parameter that has a gradient; return ``closure()``'s value if one is given.

        ``closure`` re-evaluates the model and returns the loss (it is called with gradients enabled).
        """
        loss = None
        if closure is not None:
            with enable_grad():
                loss = closure()
        for group in self.param_groups:
            self._update_group(group)
        return loss

    def finish(self) -> None:
        """End of training: nothing to do for a local optimizer. The distributed ones share this protocol
        (``zero_grad()``, ``step(closure=None)``, ``finish()``): ``LocalSGD`` averages a last time, a
        parameter server's worker says it is done, so a training loop ends every scheme alike."""

    @staticmethod
    def params_with_grad(group: dict[str, Any]) -> Iterator[tuple[Tensor, np.ndarray]]:
        """(parameter, gradient) for each parameter of the group whose ``.grad`` is set (its shape checked)."""
        for p in group["params"]:
            g = p.grad
            if g is not None:
                if g.shape != p.data.shape:  # a broadcast-shaped grad would update the wrong entries
                    raise ValueError(f"parameter of shape {p.data.shape} has a gradient of shape {g.shape}")
                yield p, g

    def _update_group(self, group: dict[str, Any]) -> None:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} does not implement _update_group()")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients: set ``p.grad = None`` (default), or fill the arrays with zeros."""
        for group in self.param_groups:
            for p in group["params"]:
                if set_to_none:
                    p.grad = None
                elif p.grad is not None:
                    p.grad.fill(0)

    # -- checkpoints
    def state_dict(self) -> dict[str, Any]:
        """``{"state": {index: {name: ndarray | number}}, "param_groups": [...]}`` (copies; see the module doc)."""
        index: dict[int, int] = {}  # id(parameter) -> its number, in order across groups
        groups = []
        for group in self.param_groups:
            ids = []
            for p in group["params"]:
                index[id(p)] = len(index)
                ids.append(index[id(p)])
            packed = {k: v for k, v in group.items() if k != "params"}
            packed["params"] = ids
            groups.append(packed)
        state = {}
        for group in self.param_groups:
            for p in group["params"]:
                if p in self.state:
                    state[index[id(p)]] = {
                        k: (v.copy() if isinstance(v, np.ndarray) else v) for k, v in self.state[p].items()
                    }
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: dict[str, Any], cast: bool = False) -> None:
        """Restore hyperparameters and per-parameter state saved by ``state_dict()``.

        The optimizer must have been built over the same number of groups with the same number of
        parameters each, and each group must have the same hyperparameter names (so Adam's state
        never loads into an SGD); every array in the state must have its parameter's shape and
        dtype (``cast=True`` converts floating-point state to the parameter's dtype). Everything is
        checked before anything changes.
        """
        name = type(self).__name__
        if not isinstance(state_dict, dict) or "state" not in state_dict or "param_groups" not in state_dict:
            raise ValueError(f"{name}.load_state_dict: expected a dict with 'state' and 'param_groups'")
        saved_groups = list(state_dict["param_groups"])
        if len(saved_groups) != len(self.param_groups):
            raise ValueError(
                f"{name}.load_state_dict: the checkpoint has {len(saved_groups)} parameter groups, "
                f"this optimizer has {len(self.param_groups)}"
            )
        params: dict[int, Tensor] = {}
        for g, (ours, saved) in enumerate(zip(self.param_groups, saved_groups)):
            check_same_hyperparameters(self, g, ours, saved)
            ids = list(saved["params"])
            if len(ids) != len(ours["params"]):
                raise ValueError(
                    f"{name}.load_state_dict: parameter group {g} has {len(ids)} parameters in the checkpoint, "
                    f"{len(ours['params'])} here"
                )
            params.update(zip((int(i) for i in ids), ours["params"]))

        new_state: dict[Tensor, dict[str, Any]] = {}
        for key, entries in state_dict["state"].items():
            if int(key) not in params:
                raise ValueError(f"{name}.load_state_dict: state for parameter {key}, which no group lists")
            p = params[int(key)]
            new_state[p] = {k: _restored(name, key, k, v, p, cast) for k, v in entries.items()}

        new_groups = []
        for ours, saved in zip(self.param_groups, saved_groups):
            group = {k: v for k, v in saved.items() if k != "params"}
            group = {**{k: v for k, v in ours.items() if k != "params"}, **group}
            # lists come back from a checkpoint where a tuple went in (e.g. Adam's betas)
            for k, v in ours.items():
                if isinstance(v, tuple) and isinstance(group[k], list):
                    group[k] = tuple(group[k])
            self._check_group(group)
            group["params"] = ours["params"]
            new_groups.append(group)
        self.param_groups = new_groups
        self.state = new_state

    def __repr__(self) -> str:
        lines = [f"{type(self).__name__} ("]
        for i, group in enumerate(self.param_groups):
            lines.append(f"Parameter Group {i}")
            lines.extend(f"    {k}: {v}" for k, v in sorted(group.items()) if k != "params")
        return "\n".join(lines) + "\n)"


def check_same_hyperparameters(opt: Optimizer, g: int, ours: dict[str, Any], saved: dict[str, Any]) -> None:
    """Refuse a saved parameter group whose hyperparameter names are not this optimizer's (another class)."""
    if not isinstance(saved, dict):
        raise ValueError(f"{type(opt).__name__}.load_state_dict: parameter group {g} is a {type(saved).__name__}")
    here, there = set(ours) - {"params"}, set(saved) - {"params"}
    if here != there:
        raise ValueError(
            f"{type(opt).__name__}.load_state_dict: parameter group {g} of the checkpoint has hyperparameters "
            f"{sorted(there - here)} this {type(opt).__name__} lacks, and lacks {sorted(here - there)}: it was "
            "saved by another optimizer"
        )


class _Required:
    """Marks a hyperparameter without a default (every group must give it)."""

    def __repr__(self) -> str:
        return "<required parameter>"


REQUIRED: Any = _Required()


def check_nonnegative(opt: Optimizer, group: dict[str, Any], *names: str) -> None:
    """Check that ``group[name] >= 0`` for each name and store it as a Python float.

    Python floats keep NumPy's arithmetic in the parameters' dtype (float32 stays float32).
    """
    for name in names:
        value = group[name]
        try:
            value = float(value)
        except (TypeError, ValueError):
            raise TypeError(f"{type(opt).__name__}: {name} must be a number, got {value!r}") from None
        if not value >= 0.0:  # also rejects NaN
            raise ValueError(f"{type(opt).__name__}: invalid {name}: {value} (must be >= 0)")
        group[name] = value


def _restored(name: str, key: Any, k: str, v: Any, p: Tensor, cast: bool) -> Any:
    """State entry ``k`` of parameter ``key``, checked against the parameter (shape; dtype unless ``cast``) and copied."""
    if not isinstance(v, np.ndarray):
        return v
    if v.shape != p.shape:
        raise ValueError(
            f"{name}.load_state_dict: state '{k}' of parameter {key} has shape {v.shape}, "
            f"but the parameter has shape {p.shape}"
        )
    if v.dtype.kind == "f" and v.dtype != p.dtype and not cast:
        raise ValueError(
            f"{name}.load_state_dict: state '{k}' of parameter {key} is {v.dtype}, the parameter "
            f"{p.dtype} (cast=True converts)"
        )
    return v.astype(p.dtype, copy=True) if v.dtype.kind == "f" else v.copy()
