"""Which examples each rank trains on: one shuffle per epoch, every global batch split across ranks.

All ranks draw the same permutation (same seed, same epoch), cut it into global batches of
``P * b`` examples, and rank r takes the r-th slice of b from each::

    permutation:  [ batch 0: r0 r0 | r1 r1 | r2 r2 ][ batch 1: r0 r0 | r1 r1 | r2 r2 ] ...

So the union of what the ranks see in step i is exactly the batch a single process with batch
``P * b`` would see in step i; with gradient averaging the two runs take the same steps.
No data moves between ranks: each rank only needs the indices.

For a language model the corpus is "batchified" into ``B = P * b`` parallel streams (columns)
and rank r keeps the contiguous columns ``r*b .. (r+1)*b - 1``: that is
``minidl.data.batchify(ids, b, rank=r, world=P)``. The hidden state carried from one BPTT window
to the next belongs to those streams, so each rank carries its own.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np

from minidl.distributed.comm import get_comm
from minidl.distributed.fingerprint import check_layout


def epoch_permutation(n: int, epoch: int, seed: int = 0) -> np.ndarray:
    """The shuffle of ``range(n)`` for ``epoch``: the same on every rank for the same (seed, epoch)."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def shard_batch(global_batch: np.ndarray, rank: int, size: int) -> np.ndarray:
    """Rank ``rank``'s contiguous slice of one global batch of ``size * b`` indices (or rows)."""
    n = len(global_batch)
    if n % size:
        raise ValueError(f"a global batch of {n} examples does not split evenly over {size} ranks")
    b = n // size
    return global_batch[rank * b : (rank + 1) * b]


class DistributedSampler:
    """Per-rank index batches over a dataset of ``n`` examples, one shuffle per epoch.

    Args:
        n: the number of examples.
        batch_size: examples per rank per step (b); a global batch is ``size * b``.
        shuffle: draw a new permutation each epoch (``set_epoch``) from ``seed``.
        drop_last: drop the last global batch if it is incomplete (else it is cut to a multiple of
            ``size`` and split evenly, dropping at most ``size - 1`` examples).
        rank, size: this rank and the number of ranks (default: the initialized communicator's).

    Every rank gets the same number of batches (``len(sampler)``), each of ``batch_size`` indices
    except, with ``drop_last=False``, the last, which is cut to a multiple of ``size`` (PyTorch's
    DistributedSampler pads instead; either way no rank takes a step the others do not). Built from a
    communicator (no ``rank``/``size`` given), it checks that every rank passes the same ``n``,
    ``batch_size``, ``seed``, ``shuffle`` and ``drop_last``, and raises the same MismatchError on
    every rank otherwise.

    Iterating gives index arrays; ``state_dict()`` records (epoch, batches already taken) so a
    resumed run continues with the next batch of the same permutation.
    """

    def __init__(
        self,
        n: int,
        batch_size: int,
        seed: int = 0,
        shuffle: bool = True,
        drop_last: bool = True,
        rank: int | None = None,
        size: int | None = None,
        comm: Any = None,
    ):
        checked = rank is None or size is None
        if checked:
            comm = get_comm(comm)
            rank, size = comm.Get_rank(), comm.Get_size()
        if not 0 <= rank < size:
            raise ValueError(f"DistributedSampler: rank {rank} is not in 0..{size - 1}")
        if batch_size < 1:
            raise ValueError(f"DistributedSampler: batch_size must be >= 1, got {batch_size}")
        if n < size * batch_size and drop_last:
            raise ValueError(f"DistributedSampler: {n} examples make no full global batch of {size} x {batch_size}")
        self.n, self.batch_size, self.seed = n, batch_size, seed
        self.shuffle, self.drop_last = shuffle, drop_last
        self.rank, self.size = rank, size
        self.epoch = 0
        self.position = 0  # batches of this epoch already handed out
        if checked:  # ranks that see datasets of other sizes would take other numbers of steps, and hang
            settings = [
                ("n", n, int),
                ("batch_size", batch_size, int),
                ("seed", seed, int),
                ("shuffle", int(shuffle), bool),
                ("drop_last", int(drop_last), bool),
            ]
            check_layout(comm, [], "DistributedSampler", settings)

    @property
    def global_batch_size(self) -> int:
        return self.size * self.batch_size

    def __len__(self) -> int:
        """Batches per epoch."""
        full, rest = divmod(self.n, self.global_batch_size)
        return full + (0 if self.drop_last or rest < self.size else 1)

    def set_epoch(self, epoch: int) -> None:
        """Start epoch ``epoch`` (its own permutation) from its first batch."""
        self.epoch, self.position = epoch, 0

    def indices(self) -> np.ndarray:
        """This epoch's order of all n examples (identical on every rank)."""
        return epoch_permutation(self.n, self.epoch, self.seed) if self.shuffle else np.arange(self.n)

    def __iter__(self) -> Iterator[np.ndarray]:
        order = self.indices()
        gb = self.global_batch_size
        while self.position < len(self):
            chunk = order[self.position * gb : (self.position + 1) * gb]
            chunk = chunk[: len(chunk) - len(chunk) % self.size]
            self.position += 1
            yield shard_batch(chunk, self.rank, self.size)

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = int(state["epoch"]), int(state["position"]), int(state["seed"])
