"""What ``algorithm="auto"`` picks: the allreduce the cost model predicts fastest for p ranks and n bytes.

It does what MPICH does with its size thresholds, but from the cost model (cost.py): it predicts
every algorithm's time for this p and message size and takes the fastest (on equal predictions,
the first in cost.PREFERENCE: the ring before Rabenseifner). ``choose_algorithm`` shows the choice
and the predictions. Every rank computes the same choice from the same (p, size, parameters); if
ranks disagree on the size, the agreement check of the chosen algorithms says so.
"""

from __future__ import annotations

import functools

from collectives.cost import ALGORITHMS, PREFERENCE, TIE, CostParams, Hops, get_params, predict


def choose_algorithm(
    p: int, nbytes: int, params: CostParams | None = None, *, link_latency: float = 0.0, hops: Hops | None = None
) -> tuple[str, dict[str, float]]:
    """The algorithm "auto" uses for p ranks and ``nbytes`` per rank, and every algorithm's predicted seconds.

    ``link_latency`` and ``hops`` (cost.predict's) make the choice for a topology whose links add latency.
    """
    name, times = _choose(p, nbytes, params or get_params(), link_latency, hops)
    return name, dict(times)


_memo: tuple[CostParams | None, dict] = (None, {})  # (parameters, {(p, nbytes): algorithm})


def auto_algorithm(p: int, nbytes: int) -> str:
    """choose_algorithm's answer for the current parameters, remembered (it costs as much as a short allreduce)."""
    global _memo
    params = get_params()
    memo_params, memo = _memo
    if memo_params is not params:  # new parameters (set_params, calibrate): forget the old answers
        memo = {}
        _memo = (params, memo)
    choice = memo.get((p, nbytes))
    if choice is None:
        choice = memo[(p, nbytes)] = _choose(p, nbytes, params)[0]
    return choice


@functools.lru_cache(maxsize=1024)
def _choose(p: int, nbytes: int, params: CostParams, link_latency: float = 0.0, hops: Hops | None = None) -> tuple:
    """Cached: the prediction costs microseconds, as much as a short allreduce."""
    times = {name: predict(name, p, nbytes, params, link_latency=link_latency, hops=hops) for name in ALGORITHMS}
    fastest = min(times.values())
    choice = next(name for name in PREFERENCE if times[name] <= fastest * (1 + TIE))  # ties: cost.PREFERENCE
    return choice, tuple(times.items())
