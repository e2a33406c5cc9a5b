"""Make every rank start from rank 0's state: parameters, buffers, optimizer state.

Data parallelism keeps P replicas of one model in step; they must start identical (and after a
resume, identical to the checkpoint), so the root's state is broadcast before training. The state
goes as one byte buffer (wire.py's ``encode``: a JSON header plus the raw array bytes) through
``collectives.broadcast``, a binomial tree of buffer-based Send/Recv, never pickle (the buffer's
length travels first, in the broadcast's agreement check). The receivers check it
against their own layout with ``load_state_dict`` (strict), so replicas built differently on
different ranks give an error naming the mismatched keys instead of silently diverging. An
optimizer's state travels with the root's layout (optimizer class, parameter groups, their
hyperparameter names and parameter shapes), since ``load_state_dict`` alone would take Adam's
state into an SGD. A rank that cannot take the root's state raises its error, and every other rank
a ``MismatchError`` quoting it, so no rank walks on into a collective the failed one never joins.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.fingerprint import check_layout, parameter_rows
from minidl.distributed.wire import broadcast_state
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer


def fail_together(comm: Any, what: str, load: Any, trouble: str = "could not take the root's state") -> None:
    """Run ``load()`` on this rank; if it raises on any rank, raise on every rank (the failed ones their own error,
    the others a MismatchError naming them and their ``trouble``), so no rank walks on into a collective the failed
    ones never join. The allreduce that tells them is also a barrier."""
    from collectives import MismatchError, allreduce

    error = None
    try:
        load()
    except (KeyError, ValueError, TypeError, OSError) as e:
        error = e
    if comm.Get_size() > 1:
        rank = comm.Get_rank()
        flags = np.zeros(comm.Get_size(), dtype=np.int64)
        flags[rank] = error is not None
        failed = np.flatnonzero(allreduce(comm, flags)).tolist()
        # each failed rank tells the others why (only when something failed: no cost otherwise)
        reasons = [broadcast_state(_message(error) if r == rank else None, r, comm) for r in failed]
        if failed and error is None:
            raise MismatchError(
                f"{what}: ranks {failed} {trouble}:\n  "
                + "\n  ".join(f"rank {r}: {reason}" for r, reason in zip(failed, reasons))
            )
    if error is not None:
        raise error


def _message(error: Exception) -> str:
    return f"{type(error).__name__}: {error.args[0] if isinstance(error, KeyError) else error}"


def broadcast_parameters(module_or_state: Module | dict[str, np.ndarray], root: int = 0, comm: Any = None) -> None:
    """Overwrite every rank's parameters and buffers with the root's (in place).

    ``module_or_state`` is a Module (parameters and buffers, e.g. BatchNorm's running statistics)
    or a dict name -> ndarray, whose arrays are overwritten in place. A rank whose model differs from the
    root's raises its error, and every other rank a MismatchError.
    """
    comm = get_comm(comm)
    if isinstance(module_or_state, (Module, dict)):
        # same names in the same order, same shapes and dtypes, else the same error on every rank: a model whose
        # parameters are declared in another order would load by name here and then mix gradients by position
        named = module_or_state.state_dict() if isinstance(module_or_state, Module) else module_or_state
        check_layout(comm, parameter_rows(named.items()), "broadcast_parameters")
    if isinstance(module_or_state, Module):
        state = broadcast_state(module_or_state.state_dict(), root, comm)
        load = lambda: module_or_state.load_state_dict(state, strict=True)  # noqa: E731
    elif isinstance(module_or_state, dict):
        state = broadcast_state({k: np.asarray(v) for k, v in module_or_state.items()}, root, comm)
        load = lambda: _copy_into(module_or_state, state, comm.Get_rank())  # noqa: E731
    else:
        raise TypeError(f"broadcast_parameters: expected a Module or a dict of arrays, got {type(module_or_state)}")
    fail_together(comm, "broadcast_parameters", load if comm.Get_rank() != root else lambda: None)


def _copy_into(arrays: dict[str, np.ndarray], state: dict[str, np.ndarray], rank: int) -> None:
    """Overwrite ``arrays`` in place with the root's ``state`` (same keys and shapes, else an error)."""
    mine, theirs = set(arrays), set(state)
    if mine != theirs:
        raise KeyError(
            f"broadcast_parameters: rank {rank} has keys {sorted(mine - theirs)} the root lacks and "
            f"lacks {sorted(theirs - mine)}"
        )
    for k, v in state.items():
        target = arrays[k]
        if np.shape(target) != v.shape:
            raise ValueError(f"broadcast_parameters: {k} has shape {np.shape(target)} here, {v.shape} on the root")
        target[...] = v


def broadcast_optimizer_state(optimizer: Optimizer, root: int = 0, comm: Any = None) -> None:
    """Give every rank the root's optimizer state (momentum buffers, Adam moments, step counts, lr).

    Every rank's optimizer must be built as the root's: the same class (the wrapped one, for a
    DistributedOptimizer or LocalSGD), parameter groups with the same hyperparameter names, and
    parameters of the same shapes. A rank whose optimizer differs raises a ValueError naming the
    differences, and every other rank a MismatchError quoting it.
    """
    comm = get_comm(comm)
    rank = comm.Get_rank()
    layout = optimizer_layout(optimizer)
    mine = {"layout": layout, "state_dict": optimizer.state_dict()} if rank == root else None
    root_state = broadcast_state(mine, root, comm)

    def load() -> None:
        differences = layout_differences(root_state["layout"], layout, root_state["state_dict"])
        if differences:
            raise ValueError(
                f"broadcast_optimizer_state: rank {rank}'s optimizer differs from the root's: " + "; ".join(differences)
            )
        optimizer.load_state_dict(root_state["state_dict"])

    fail_together(comm, "broadcast_optimizer_state", load if rank != root else lambda: None)


def optimizer_layout(optimizer: Any) -> dict[str, Any]:
    """What two ranks' optimizers must share for one to take the other's state: the class of the innermost
    optimizer (under DistributedOptimizer or LocalSGD wrappers), and per group its hyperparameter names
    and its parameters' shapes."""
    inner = optimizer
    while hasattr(inner, "optimizer"):
        inner = inner.optimizer
    return {
        "class": type(inner).__name__,
        "groups": [
            {"hyperparameters": sorted(k for k in g if k != "params"), "shapes": [list(p.shape) for p in g["params"]]}
            for g in optimizer.param_groups
        ],
    }


def layout_differences(root: dict[str, Any], mine: dict[str, Any], root_state_dict: dict[str, Any]) -> list[str]:
    """How this rank's ``optimizer_layout`` differs from the root's, in words (empty: it does not)."""
    out = []
    if root["class"] != mine["class"]:
        keys = sorted({k for entries in root_state_dict["state"].values() for k in entries})
        kept = f" (per-parameter state {keys})" if keys else ""
        out.append(f"optimizer class: {root['class']} on the root{kept}, {mine['class']} here")
    if len(root["groups"]) != len(mine["groups"]):
        return out + [f"{len(root['groups'])} parameter groups on the root, {len(mine['groups'])} here"]
    for g, (theirs, ours) in enumerate(zip(root["groups"], mine["groups"])):
        names_root, names_here = set(theirs["hyperparameters"]), set(ours["hyperparameters"])
        if names_root != names_here:
            out.append(
                f"group {g} hyperparameters: {sorted(names_root - names_here)} only on the root, "
                f"{sorted(names_here - names_root)} only here"
            )
        if len(theirs["shapes"]) != len(ours["shapes"]):
            out.append(f"group {g}: {len(theirs['shapes'])} parameters on the root, {len(ours['shapes'])} here")
            continue
        out += [
            f"group {g} parameter {i}: shape {tuple(a)} on the root, {tuple(b)} here"
            for i, (a, b) in enumerate(zip(theirs["shapes"], ours["shapes"]))
            if a != b
        ]
    return out
