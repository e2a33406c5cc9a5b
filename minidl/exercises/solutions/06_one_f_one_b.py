"""Exercise 6, reference solution: 1F1B (minidl/distributed/pipeline/schedule.py has the library's)."""

from __future__ import annotations


def one_f_one_b(num_micro: int, num_stages: int, stage: int) -> list[tuple[str, int]]:
    warmup = min(num_stages - stage - 1, num_micro)
    ops = [("F", i) for i in range(warmup)]
    for i in range(num_micro - warmup):
        ops += [("F", warmup + i), ("B", i)]
    return ops + [("B", i) for i in range(num_micro - warmup, num_micro)]
