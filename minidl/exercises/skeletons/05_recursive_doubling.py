"""Exercise 5: recursive-doubling allreduce for any number of ranks (tutorial 04, section 6).

Powers of two: in step k (k = 0 .. log2 p - 1) rank r swaps its whole partial result with rank r XOR 2^k
and both combine the two, so after log2 p steps every partial covers every rank. To keep the same bits on
both partners, both must compute f(lower rank's partial, upper rank's partial), in that order.

Any p (MPICH's fold; collectives/fold.py): let p' be the largest power of two <= p and rem = p - p'.

    fold in:   for i < rem, even rank 2i sends x to odd rank 2i + 1, which combines f(x_2i, x_2i+1);
               the even ranks sit out.
    the p' ranks left take new ranks: 2i + 1 -> i (i < rem), r -> r - rem (r >= 2 rem), and run the
               power-of-two algorithm with partners new XOR 2^k (translate back to old ranks to send).
    fold out:  rank 2i + 1 sends the result back to rank 2i.

Cost: log2 p' + 2 (p != p') rounds, each with the whole vector (the ring: 2 (p - 1) rounds of n / p):
the short-message algorithm. The checker holds you to that number of rounds.

Check it:  python -m minidl.exercises check recursive_doubling
"""

from __future__ import annotations

from typing import Any

import numpy as np


def allreduce(comm: Any, x: np.ndarray, f: Any) -> np.ndarray:
    """f over every rank's flat ``x`` [n], as a new flat array [n] on every rank; ``x`` is not modified."""
    raise NotImplementedError("exercise: allreduce")
