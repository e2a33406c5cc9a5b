"""Exercise 6: the 1F1B pipeline schedule (PipeDream-Flush; tutorial 06, sections 3 to 6).

A mini-batch is cut into m micro-batches that flow through p stages. Stage s runs F(i), the forward of
micro-batch i, after stage s - 1 has run F(i), and B(i), its backward, after stage s + 1 has run B(i).
A schedule is the order of the 2m ops on one stage, as a list of ("F", i) and ("B", i).

GPipe runs every forward, then every backward: stage s then holds the activations of all m micro-batches.
1F1B (Narayanan et al., "Memory-efficient pipeline-parallel DNN training", 2021) runs on stage s

    warm-up     w = min(p - s - 1, m) forwards:   F(0) .. F(w - 1)
    steady      for i = 0 .. m - w - 1:           F(w + i), B(i)      one forward, one backward
    cool-down   the last w backwards:             B(m - w) .. B(m - 1)

so at most min(p - s, m) micro-batches are in flight on stage s (forward run, backward not yet), and with
forward and backward times t_f, t_b on every stage the pipeline takes (m + p - 1)(t_f + t_b), the same as
GPipe: each stage idles for the bubble (p - 1) / (m + p - 1) of the time.

Worked example, p = 4, m = 6: stage 0: F0 F1 F2 F3 B0 F4 B1 F5 B2 B3 B4 B5;  stage 3: F0 B0 F1 B1 ... F5 B5.

The checker holds your schedule to these rules (every op once, in order, F(i) before B(i), the warm-up,
the alternation, the memory bound) and runs it on an ideal pipeline (minidl.distributed.pipeline.schedule
.timeline, t_f = 1, t_b = 2) for its bubble.

Check it:  python -m minidl.exercises check one_f_one_b
"""

from __future__ import annotations


def one_f_one_b(num_micro: int, num_stages: int, stage: int) -> list[tuple[str, int]]:
    """The 1F1B order of the 2 * num_micro ops on ``stage`` (0 .. num_stages - 1): ("F", i) and ("B", i)."""
    raise NotImplementedError("exercise: one_f_one_b")
