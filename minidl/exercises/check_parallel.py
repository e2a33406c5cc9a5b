"""Checkers of exercises 6 to 8: the 1F1B schedule, data-parallel gradient averaging, ZeRO-1.

Oracles: the schedule's rules and the ideal pipeline of ``pipeline.schedule.timeline`` (its bubble against
GPipe's formula); one process on the whole batch (exercise 7) or with the whole momentum (exercise 8).
Ranks are in-process threads (``collectives.simulate``), so a deadlock is reported, not a hang.
"""

from __future__ import annotations

import itertools
from types import ModuleType
from typing import Any

import numpy as np

import collectives
import minidl
from minidl import nn
from minidl.distributed.pipeline.schedule import BACKWARD, FORWARD, bubble_formula, bubble_fraction, timeline
from minidl.exercises.core import Broke, canonical, expect_close, first_failure

# --------------------------------------------------------------------------- exercise 6: 1F1B


def _schedule_cases(tier: str, seed: int) -> list[tuple[int, int]]:
    """(m, p), smallest first."""
    if tier == "check":
        grid = [(m, p) for m in range(1, 7) for p in range(1, 6)]
    else:
        rng = np.random.default_rng(seed)
        grid = [(int(rng.integers(1, 33)), int(rng.integers(1, 13))) for _ in range(12)]
    return sorted(set(grid), key=lambda c: (c[0] + c[1], c[1], c[0]))


def _stage_rules(ops: Any, m: int, p: int, s: int) -> None:
    """One stage's order against the rules of 1F1B, the first broken rule raised."""
    where = f"stage {s}: "
    well_formed = lambda o: isinstance(o, tuple) and len(o) == 2 and o[0] in (FORWARD, BACKWARD)
    if not isinstance(ops, list) or not all(well_formed(o) and isinstance(o[1], int | np.integer) for o in ops):
        raise Broke("returns", "", where + f'expected a list of ("F" or "B", micro-batch) tuples, got {ops!r:.200}')
    want = sorted([(FORWARD, i) for i in range(m)] + [(BACKWARD, i) for i in range(m)])
    if sorted(ops) != want:
        raise Broke("every op once", "", where + f"expected F(i) and B(i) once each for i < {m}, got {ops}")
    for kind in (FORWARD, BACKWARD):
        order = [i for k, i in ops if k == kind]
        if order != list(range(m)):
            raise Broke("in order", "", where + f"the {kind}s must run in micro-batch order, got {order}")
    for i in range(m):
        if ops.index((FORWARD, i)) > ops.index((BACKWARD, i)):
            raise Broke("forward before backward", "", where + f"B({i}) runs before F({i}): {ops}")
    first_b = ops.index((BACKWARD, 0))
    w = min(p - s - 1, m)
    if first_b != min(w + 1, m):
        raise Broke(
            "warm-up",
            "",
            where + f"{w} warm-up forwards, then F({w}), B(0): expected "
            f"{min(w + 1, m)} forwards before B(0), got {first_b}: {ops}",
        )
    for k in range(m - w):  # steady state: F(w + k), B(k)
        pos = w + 2 * k
        if ops[pos : pos + 2] != [(FORWARD, w + k), (BACKWARD, k)]:
            raise Broke(
                "one forward, one backward",
                "",
                where + f"after the warm-up of {w} expected F({w + k}), "
                f"B({k}) at positions {pos}, {pos + 1}, got {ops[pos : pos + 2]}: {ops}",
            )
    held = peak = 0
    for kind, _ in ops:
        held += 1 if kind == FORWARD else -1
        peak = max(peak, held)
    if peak > min(p - s, m):
        raise Broke("memory", "", where + f"{peak} micro-batches in flight, at most min(p - s, m) = {min(p - s, m)}")


def _schedule_one(module: ModuleType, case: tuple[int, int]) -> None:
    m, p = case
    ops = [module.one_f_one_b(m, p, s) for s in range(p)]
    for s, stage_ops in enumerate(ops):
        _stage_rules(stage_ops, m, p, s)
    try:
        events = timeline(ops, 1.0, 2.0, name="one_f_one_b")
    except RuntimeError as e:
        raise Broke("no deadlock", "", str(e)) from None
    got, want = bubble_fraction(events, p), bubble_formula(m, p)
    if abs(got - want) > 1e-12:
        raise Broke(
            "bubble",
            "",
            f"idle fraction {got:.6f} on an ideal pipeline (t_f = 1, t_b = 2), "
            f"expected (p - 1) / (m + p - 1) = {want:.6f}",
        )


def check_schedule(module: ModuleType, tier: str, seed: int) -> None:
    first_failure(_schedule_cases(tier, seed), lambda c: _schedule_one(module, c), lambda c: f"m={c[0]}, p={c[1]}")


def digest_schedule(module: ModuleType, seed: int) -> str:
    rng = np.random.default_rng(seed)
    m, p = int(rng.integers(5, 41)), int(rng.integers(2, 17))
    return f"m={m} p={p} " + " | ".join(" ".join(f"{k}{i}" for k, i in module.one_f_one_b(m, p, s)) for s in range(p))


# --------------------------------------------------------------------------- exercise 7: gradient averaging


def _linear(weights: tuple[np.ndarray, np.ndarray]) -> nn.Linear:
    model = nn.Linear(weights[0].shape[1], weights[0].shape[0], dtype=np.float64)
    model.weight.data[...] = weights[0]
    model.bias.data[...] = weights[1]  # type: ignore[union-attr]  # bias=True
    return model


def _mse_grads(model: nn.Linear, x: np.ndarray, y: np.ndarray) -> None:
    if len(x):
        ((model(minidl.tensor(x)) - minidl.tensor(y)) ** 2).mean().backward()


def _dp_data(N: int, k: int) -> tuple[tuple[np.ndarray, np.ndarray], np.ndarray, np.ndarray]:
    """Small integers: every product and sum of the forward and backward is exact in float64."""
    rng = np.random.default_rng(k)
    weights = (rng.integers(-2, 3, (2, 3)).astype(np.float64), rng.integers(-2, 3, 2).astype(np.float64))
    return weights, rng.integers(-2, 3, (N, 3)).astype(np.float64), rng.integers(-3, 4, (N, 2)).astype(np.float64)


def _dp_run(module: ModuleType, p: int, N: int, k: int) -> tuple[list[np.ndarray], list[list[np.ndarray]], bool]:
    """(one process's gradients, each rank's after average_gradients, whether every value is exact)."""
    weights, x, y = _dp_data(N, k)
    one = _linear(weights)
    _mse_grads(one, x, y)
    shards = np.array_split(np.arange(N), p)

    def rank(comm: Any) -> list[np.ndarray]:
        model = _linear(weights)
        idx = shards[comm.Get_rank()]
        _mse_grads(model, x[idx], y[idx])
        params = list(model.parameters())
        module.average_gradients(comm, params, len(idx))
        return [np.asarray(p_.grad) for p_ in params]

    pow2 = lambda c: c & (c - 1) == 0
    exact = pow2(N) and all(pow2(len(s)) for s in shards)  # 0 counts as one
    grads = [np.asarray(p_.grad) for p_ in one.parameters()]  # weight, bias
    return grads, list(collectives.simulate(p, rank)), exact


def _dp_cases(tier: str, seed: int) -> list[tuple[int, int, int]]:
    """(p, N, seed), smallest first: equal shards, unequal ones, a rank with no samples."""
    if tier == "check":
        grid = [(1, 1), (1, 4), (2, 2), (2, 3), (2, 4), (3, 4), (3, 6), (4, 2), (4, 4), (4, 8), (5, 7)]
        return [(p, N, k) for k, (p, N) in enumerate(grid)]
    rng = np.random.default_rng(seed)
    grid = sorted({(int(rng.integers(1, 9)), int(rng.integers(1, 40))) for _ in range(8)})
    return [(p, N, int(seed) + k) for k, (p, N) in enumerate(grid)]


def _dp_one(module: ModuleType, case: tuple[int, int, int]) -> None:
    p, N, k = case
    want, ranks, exact = _dp_run(module, p, N, k)
    for r, grads in enumerate(ranks):
        for name, g, w in zip(("weight.grad", "bias.grad"), grads, want):
            prop = "exact against one process" if exact else "against one process (1e-12)"
            expect_close(f"rank {r}'s {name}", g, w, prop, atol=0.0 if exact else 1e-12, rtol=0.0 if exact else 1e-12)
    for r, grads in enumerate(ranks[1:], start=1):
        for name, g, g0 in zip(("weight.grad", "bias.grad"), grads, ranks[0]):
            if g.tobytes() != g0.tobytes():
                raise Broke("same bits on every rank", "", f"rank {r}'s {name} differs from rank 0's: {g} vs {g0}")


def check_average(module: ModuleType, tier: str, seed: int) -> None:
    describe = lambda c: (
        f"p={c[0]} ranks, a global batch of N={c[1]}: counts {[len(s) for s in np.array_split(range(c[1]), c[0])]}"
    )
    first_failure(_dp_cases(tier, seed), lambda c: _dp_one(module, c), describe)


def digest_average(module: ModuleType, seed: int) -> str:
    rng = np.random.default_rng(seed)
    p, N = int(rng.integers(2, 7)), int(rng.integers(7, 30))
    _, ranks, _ = _dp_run(module, p, N, seed)
    return canonical(*ranks[0])


# --------------------------------------------------------------------------- exercise 8: ZeRO-1
LR, MOMENTUM, STEPS = 0.1, 0.9, 3


def _grads(k: int, p: int, n: int) -> list[list[np.ndarray]]:
    """[step][rank] gradients."""
    rng = np.random.default_rng(k)
    return [[rng.standard_normal(n) for _ in range(p)] for _ in range(STEPS)]


def _zero_run(module: ModuleType, p: int, n: int, k: int) -> tuple[np.ndarray, list[tuple[np.ndarray, Any]]]:
    """(one process's w after STEPS steps, each rank's (w, velocity))."""
    w0, grads = np.random.default_rng(k + 1).standard_normal(n), _grads(k, p, n)
    w, v = w0.copy(), np.zeros(n)
    for step in grads:
        v = MOMENTUM * v + sum(step) / p
        w = w - LR * v

    def rank(comm: Any) -> tuple[np.ndarray, Any]:
        r, mine = comm.Get_rank(), w0.copy()
        opt = module.ZeroSGD(comm, n, LR, MOMENTUM)
        _state(opt, n, p, r)
        for step in grads:
            g = step[r].copy()
            opt.step(mine, g)
            if not np.array_equal(g, step[r]):
                raise Broke("grad untouched", "", f"rank {r}'s step changed its grad argument")
        _state(opt, n, p, r)
        return mine, opt.velocity

    return w, list(collectives.simulate(p, rank))


def _split_bounds(n: int, p: int, r: int) -> tuple[int, int]:
    """np.array_split's block r of n elements over p, as (lo, hi)."""
    sizes = [len(b) for b in np.array_split(np.arange(n), p)]
    lo = sum(sizes[:r])
    return lo, lo + sizes[r]


def _state(opt: Any, n: int, p: int, r: int) -> None:
    lo, hi = _split_bounds(n, p, r)
    v = opt.velocity
    if not isinstance(v, np.ndarray) or v.shape != (hi - lo,):
        got = v.shape if isinstance(v, np.ndarray) else type(v).__name__
        raise Broke("state sharded", "", f"rank {r}'s velocity must be its shard's, shape ({hi - lo},), got {got}")


def _zero_cases(tier: str, seed: int) -> list[tuple[int, int, int]]:
    if tier == "check":
        grid = [(1, 1), (1, 5), (2, 1), (2, 4), (2, 5), (3, 7), (4, 3), (4, 10), (5, 12)]
        return [(p, n, k) for k, (p, n) in enumerate(grid)]
    rng = np.random.default_rng(seed)
    grid = sorted({(int(rng.integers(1, 9)), int(rng.integers(0, 60))) for _ in range(8)})
    return [(p, n, int(seed) + k) for k, (p, n) in enumerate(grid)]


def _bounds_one(module: ModuleType, case: tuple[int, int]) -> None:
    n, p = case
    for r in range(p):
        want = _split_bounds(n, p, r)
        got = module.shard_bounds(n, p, r)
        if tuple(got) != want:
            raise Broke("shard bounds", "", f"shard_bounds({n}, {p}, {r}) = {got}, np.array_split's block is {want}")


def _zero_one(module: ModuleType, case: tuple[int, int, int]) -> None:
    p, n, k = case
    want, ranks = _zero_run(module, p, n, k)
    for r, (w, _) in enumerate(ranks):
        expect_close(f"rank {r}'s w after {STEPS} steps", w, want, "against one process (1e-12)", 1e-12, 1e-12)
    for r, (w, _) in enumerate(ranks[1:], start=1):
        if w.tobytes() != ranks[0][0].tobytes():
            raise Broke("same bits on every rank", "", f"rank {r}'s w differs from rank 0's")


def check_zero(module: ModuleType, tier: str, seed: int) -> None:
    sizes = sorted(itertools.product(range(0, 9), range(1, 6)), key=sum)
    first_failure(sizes, lambda c: _bounds_one(module, c), lambda c: f"n={c[0]}, p={c[1]}")
    describe = lambda c: f"p={c[0]} ranks, n={c[1]} parameters, {STEPS} steps of lr={LR}, momentum={MOMENTUM}"
    first_failure(_zero_cases(tier, seed), lambda c: _zero_one(module, c), describe)


def digest_zero(module: ModuleType, seed: int) -> str:
    rng = np.random.default_rng(seed)
    p, n = int(rng.integers(2, 7)), int(rng.integers(5, 40))
    _, ranks = _zero_run(module, p, n, seed)
    return canonical(ranks[0][0])
