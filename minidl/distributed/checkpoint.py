"""Rank-0 checkpoints, and a resume that continues exactly (bitwise) where the run stopped.

Every replica holds the same model and optimizer state, so rank 0 alone writes them. What differs
between ranks - each rank's random generator (dropout masks), an LSTM's hidden state carried over
its own streams - is gathered to rank 0 and written beside it, one entry per rank. On resume
rank 0 reads the file and sends each rank what it needs: the shared part by broadcast, the per-rank
part by point-to-point (so the file need not be on a filesystem every rank sees).

One checkpoint (``minidl.save``: an .npz, no pickle) holds::

    model        model.state_dict()                 (rank 0's; the replicas are identical)
    optimizer    optimizer.state_dict()             (momentum, Adam moments, lr in force, ...)
    scheduler    scheduler.state_dict()             (the LR schedule's counter)
    state        the caller's shared dict           (epoch, step, data position, ...)
    ranks        [rank 0's dict, rank 1's dict, ...] (RNG state via ``rng_state``, hidden state, ...)
    world_size   P

A run that trains k steps, saves, and is resumed for k more steps then ends with the same bits
as a run of 2k steps, provided everything that feeds the computation is in the checkpoint
(the tests check this for the LSTM LM with dropout under mpiexec).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.state import fail_together
from minidl.distributed.wire import broadcast_state, encode, gather_states, scatter_states
from minidl.nn.module import Module
from minidl.optim.optimizer import Optimizer


def rng_state(generator: np.random.Generator) -> str:
    """A NumPy Generator's exact state as a string (its 128-bit counters do not fit int64 arrays)."""
    return json.dumps(generator.bit_generator.state)


def set_rng_state(generator: np.random.Generator, state: str) -> None:
    """Put ``generator`` back in the state ``rng_state`` recorded."""
    generator.bit_generator.state = json.loads(state)


def _pending(optimizer: Any) -> int:
    return int(getattr(optimizer, "pending_passes", 0))


def save_checkpoint(
    path: str | os.PathLike[str],
    model: Module,
    optimizer: Optimizer | None = None,
    scheduler: Any = None,
    state: dict[str, Any] | None = None,
    rank_state: dict[str, Any] | None = None,
    comm: Any = None,
) -> None:
    """Write a checkpoint from rank 0 (call it on every rank: it gathers ``rank_state`` and waits for the write).

    Args:
        model, optimizer, scheduler: what to save (their ``state_dict()``s; the scheduler may be None).
        state: a dict that is the same on every rank (epoch, step, sampler.state_dict(), ...); rank 0's is saved.
        rank_state: this rank's own dict (``{"rng": dist.rng_state(rng), "hidden": h}``); one per rank is saved.
    """
    comm = get_comm(comm)
    if optimizer is not None and _pending(optimizer):
        raise RuntimeError(
            f"save_checkpoint: the optimizer holds {_pending(optimizer)} accumulated backward passes not yet "
            "applied; checkpoint right after an update (when opt.step() returned True)"
        )
    # a rank_state that cannot be sent (an object) fails on every rank, not on its own rank while the root waits
    fail_together(comm, "save_checkpoint", lambda: encode(rank_state or {}), "have a rank_state that cannot be saved")
    ranks = gather_states(rank_state or {}, 0, comm)

    def write() -> None:
        if comm.Get_rank() == 0:
            from minidl.serialization import save

            ckpt: dict[str, Any] = {"model": model.state_dict(), "world_size": comm.Get_size(), "ranks": ranks}
            if optimizer is not None:
                ckpt["optimizer"] = optimizer.state_dict()
            if scheduler is not None:
                ckpt["scheduler"] = scheduler.state_dict()
            ckpt["state"] = state or {}
            save(ckpt, path)

    # the root's failure (an object in ``state``, a full disk) raises on every rank; and nobody goes on (or
    # reads the file) before it is complete: fail_together's allreduce is the barrier
    fail_together(comm, "save_checkpoint", write, f"could not write {os.fspath(path)!r}")


def load_checkpoint(
    path: str | os.PathLike[str],
    model: Module,
    optimizer: Optimizer | None = None,
    scheduler: Any = None,
    comm: Any = None,
    reshard: Callable[[list[dict[str, Any]], int], list[dict[str, Any]]] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Restore ``model``, ``optimizer`` and ``scheduler`` on every rank from rank 0's read of ``path``.

    Returns ``(state, rank_state)``: the shared dict and this rank's own dict given to ``save_checkpoint``.
    The number of ranks must be the one the checkpoint was written with when it holds per-rank state, unless
    ``reshard(saved_rank_states, size)`` is given: rank 0 then turns the P saved per-rank dicts into ``size`` new
    ones (an LSTM's carried state cut again over the new ranks' streams, ...).
    Whatever goes wrong - a missing, corrupt or malformed file on rank 0, a model or optimizer that
    does not fit on any rank - raises on every rank (a ``CheckpointError`` with the same words where
    the file is at fault), so no rank is left waiting for the others.
    """
    comm = get_comm(comm)
    rank, size = comm.Get_rank(), comm.Get_size()
    ckpt, ranks = None, None
    if rank == 0:
        ckpt, ranks = _read_on_root(path, size, reshard)
    ckpt = broadcast_state(ckpt, 0, comm)
    if "error" in ckpt:
        from minidl.serialization import CheckpointError

        raise CheckpointError(f"load_checkpoint: {ckpt['error']}")
    mine = scatter_states(ranks, 0, comm)

    def restore() -> None:
        model.load_state_dict(ckpt["model"], strict=True)
        if optimizer is not None:
            if "optimizer" not in ckpt:
                raise KeyError(f"load_checkpoint: {path} has no optimizer state")
            optimizer.load_state_dict(ckpt["optimizer"])
        if scheduler is not None:
            if "scheduler" not in ckpt:
                raise KeyError(f"load_checkpoint: {path} has no scheduler state")
            scheduler.load_state_dict(ckpt["scheduler"])

    fail_together(comm, "load_checkpoint", restore)
    return ckpt.get("state", {}), mine


def _read_on_root(path: str | os.PathLike[str], size: int, reshard: Any = None) -> tuple[dict[str, Any], list[Any]]:
    """Rank 0: (the checkpoint without its per-rank part, one per-rank dict per rank), or ({"error": why}, [{}...])
    for any failure, which load_checkpoint then raises on every rank."""
    from minidl.serialization import load

    empty: list[Any] = [{}] * size
    try:
        ckpt = load(path)
    except Exception as e:  # noqa: BLE001 - any failure here must reach every rank, not rank 0 alone
        return {"error": f"{type(e).__name__}: {e}"}, empty
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get("model"), dict):
        return {"error": f"{path} is not a checkpoint of save_checkpoint (no 'model' dict at its top)"}, empty
    ranks = ckpt.pop("ranks", None) or empty
    saved = ckpt.get("world_size", size)
    if not isinstance(ranks, list) or not isinstance(saved, int) or not all(isinstance(r, dict) for r in ranks):
        return {"error": f"{path}: malformed 'ranks' or 'world_size' entries"}, empty
    if saved < 1 or (any(ranks) and len(ranks) != saved):
        return {"error": f"{path}: field world_size = {saved} does not match its {len(ranks)} per-rank states"}, empty
    if saved != size and any(ranks) and reshard is not None:
        try:
            ranks = reshard(ranks, size)
        except Exception as e:  # noqa: BLE001 - reaches every rank as a CheckpointError
            return {"error": f"{path}: its per-rank state of {saved} ranks cannot go to {size}: {e}"}, empty
    elif saved != size and any(ranks):
        return {"error": f"{path} was written by {saved} ranks and holds per-rank state; resume with {saved}"}, empty
    if len(ranks) != size:
        ranks = empty
    return ckpt, ranks


def checkpoint_info(path: str | os.PathLike[str], comm: Any = None) -> dict[str, Any]:
    """``{"state": the shared dict, "world_size": P}`` of the checkpoint at ``path``, read by rank 0 and given to
    every rank (before the model is built: a resume at another size needs the saved global batch first).
    Raises ``CheckpointError`` on every rank when rank 0 cannot read it."""
    comm = get_comm(comm)
    info = None
    if comm.Get_rank() == 0:
        ckpt, _ = _read_on_root(path, comm.Get_size(), reshard=lambda ranks, size: [{}] * size)
        info = ckpt if "error" in ckpt else {"state": ckpt.get("state", {}), "world_size": ckpt.get("world_size", 1)}
    info = broadcast_state(info, 0, comm)
    if "error" in info:
        from minidl.serialization import CheckpointError

        raise CheckpointError(f"load_checkpoint: {info['error']}")
    return info
