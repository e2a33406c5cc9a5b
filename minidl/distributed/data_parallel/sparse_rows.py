"""Row-sparse gradients (an embedding table's) exchanged as their non-zero rows: an allgather, not an allreduce.

An embedding's gradient dW [V, H] is zero outside the rows its batch looked up: the LM of Zaremba et
al. looks up at most 400 of its 10,000 rows a step, so 96% of the 8 MB table that a dense allreduce
moves is zeros. Horovod exchanges such gradients (TensorFlow's IndexedSlices) by allgathering their
row indices and rows (Sergeev & Del Balso 2018, "Horovod"); PyTorch's ``Embedding(sparse=True)``
makes a sparse gradient tensor that DDP exchanges the same way. Here the gradient stays a dense array
on each rank, so every optimizer and ``clip_grad_norm`` work on it unchanged (PyTorch's sparse
gradients cannot be clipped), and only the exchange changes. ``nn.Embedding(sparse=True)`` marks its
weight (``sparse_grad``); ``DistributedOptimizer(sparse_as_dense=True)`` turns the exchange off.

Cost, p ranks, rows of H values of w bytes, rank r with k_r non-zero rows, K = sum_r k_r:

    dense ring allreduce    2 (p - 1) alpha + 2 (p - 1)/p V H w beta + (p - 1)/p V H w gamma
    rows allgather          3 (p - 1) alpha + (K - k_r) (H w + 8) beta + K H w gamma
                            (counts, indices and rows: three ring allgathers; the adds place the rows)

Steps (the same on every rank, so every rank ends with the same bits):
  1. this rank's non-zero rows: ids = the rows with any non-zero value (NaN counts as non-zero);
  2. allgather [k_r, has_grad_r]: if K > V / 2 the rows would be no cheaper, and every rank, having the
     same counts, falls back to the dense allreduce of the whole table; if no rank has a gradient it
     stays None, as in the dense path;
  3. allgather the indices and the rows (ring allgathers of K entries, block r from rank r);
  4. sum in rank order: zero this rank's own rows of its gradient (the rest is zero already), add rank
     0's rows, then rank 1's, ...; scale the touched rows (1/p for an average).

Worked example, p = 2, V = 5, H = 1: rank 0's dW = [0, 2, 0, 1, 0], rank 1's = [0, 3, 0, 0, 4].
    ids: rank 0 [1, 3], rank 1 [1, 4]         counts [[2, 1], [2, 1]], K = 4 > V/2 = 2.5: dense
With V = 10 and the same rows K = 4 <= 5: both ranks gather ids [1, 3 | 1, 4] and rows [2, 1 | 3, 4],
    zero rows 1, 3 (rank 0) or 1, 4 (rank 1), add [2, 1] at [1, 3], then [3, 4] at [1, 4]:
    [0, 5, 0, 1, 4, 0, ...] on both; times 1/2 for the average: [0, 2.5, 0, 0.5, 2, 0, ...].
At p = 2 every row is 0 + a + b, bitwise the dense ring's a + b (two terms add alike in either order).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from minidl.tensor import Tensor


def nonzero_rows(g: np.ndarray) -> np.ndarray:
    """The indices of the rows (along axis 0) of ``g`` that hold any non-zero (or NaN) value."""
    return np.flatnonzero(g.reshape(len(g), -1).any(axis=1))


def exchange_rows(p: Tensor, comm: Any, scale: float, dense: Any) -> None:
    """Sum ``p.grad`` over the ranks of ``comm`` by its non-zero rows, times ``scale``, in place on every rank.

    ``dense()``: the dense allreduce of the same gradient, run (on every rank alike) when the rows would
    not be cheaper. Every rank must call this for the same parameter at the same point.
    """
    import collectives
    from collectives.algorithms.ring import allgather_into

    g = p.grad
    if g is not None and (not g.flags.c_contiguous or not g.flags.writeable or g.dtype != p.data.dtype):
        g = p.grad = np.array(g, dtype=p.data.dtype, order="C")  # summed in place below, in the parameter's dtype
    ids = nonzero_rows(g) if g is not None else np.empty(0, np.int64)
    counts = collectives.allgather(comm, np.array([len(ids), g is not None], np.int64))  # [P, 2]
    if not counts[:, 1].any():
        return  # no rank has a gradient: it stays None
    bounds = np.concatenate([[0], np.cumsum(counts[:, 0])])
    total, rank = int(bounds[-1]), comm.Get_rank()
    if total > len(p.data) / 2:
        dense()  # every rank has the same counts, so every rank takes this branch
        return
    width = int(np.prod(p.data.shape[1:], dtype=np.int64))
    mine = slice(int(bounds[rank]), int(bounds[rank + 1]))
    all_ids = np.empty(total, np.int64)
    all_ids[mine] = ids
    allgather_into(comm, all_ids, [int(b) for b in bounds])
    if g is None:
        g = p.grad = np.zeros(p.data.shape, p.data.dtype)  # C order: the row view below must not be a copy
    rows2 = g.reshape(len(g), -1)
    rows = np.empty((total, width), g.dtype)
    rows[mine] = rows2[ids]
    allgather_into(comm, rows.reshape(-1), [int(b) * width for b in bounds])
    rows2[ids] = 0  # the sum below starts from zero on every rank: this rank's rows come back in their turn
    for r in range(len(counts)):  # rank order: every rank adds the same numbers in the same order
        part = slice(int(bounds[r]), int(bounds[r + 1]))
        rows2[all_ids[part]] += rows[part]  # a rank's ids are distinct, so += adds each row once
    if scale != 1.0:
        touched = np.unique(all_ids)
        rows2[touched] *= g.dtype.type(scale)
