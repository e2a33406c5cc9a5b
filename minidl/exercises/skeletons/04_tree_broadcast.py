"""Exercise 4: the binomial-tree broadcast (tutorial 04, section 4).

The root's flat ``buf`` reaches every rank in ceil(log2 p) rounds, because every rank that has it sends it
on: in round k (k = 0, 1, ...) the 2^k ranks that hold it each send it to one rank that does not.

Work with ranks relative to the root, vr = (rank - root) % p, so the root is vr = 0. MPICH's tree:

    receive: the parent of vr > 0 is vr - lowbit(vr), lowbit(vr) = the lowest set bit of vr
             (vr = 6 = 0b110: parent 4; vr = 5 = 0b101: parent 4; vr = 4: parent 0)
    send:    to the children vr + 2^j for every 2^j < lowbit(vr) (for the root: every 2^j < p)
             with vr + 2^j < p, the largest 2^j first

Worked example, p = 8, root 0:  round 1: 0->4   round 2: 0->2, 4->6   round 3: 0->1, 2->3, 4->5, 6->7.
Each rank other than the root receives exactly once: p - 1 messages in all, ceil(log2 p) rounds.
Translate back with (v + root) % p. ``comm.Send(buf, dest)`` and ``comm.Recv(buf, source)``.

Check it:  python -m minidl.exercises check tree_broadcast
"""

from __future__ import annotations

from typing import Any

import numpy as np


def broadcast(comm: Any, buf: np.ndarray, root: int) -> None:
    """In place: afterwards every rank's flat ``buf`` holds the root's (the root's is left as it is)."""
    raise NotImplementedError("exercise: broadcast")
