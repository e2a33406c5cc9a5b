"""``python -m minidl.train {lm,cnn} [flags]``: the language-model or the CNN task, through the one loop."""

from __future__ import annotations

import math
import sys
from typing import Any

from minidl.tools.threads import limit_blas_threads

PROGRAMS = {"lm": "an LSTM language model (Zaremba et al. 2014)", "cnn": "a ResNet on images"}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    limit_blas_threads()  # one BLAS thread per rank when ranks share a node and the user did not choose
    if not argv or argv[0] not in PROGRAMS:
        lines = "\n".join(f"  {name:4s} {what}" for name, what in PROGRAMS.items())
        print(f"usage: python -m minidl.train {{lm,cnn}} [--help] [flags]\n\nprograms:\n{lines}", file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    from minidl.train import cnn, lm

    result = {"lm": lm, "cnn": cnn}[argv[0]].main(argv[1:])
    problem = diverged(result)
    if problem:
        from minidl.distributed.usage import launch_rank

        if launch_rank() == 0:  # every rank has the same scores: one line
            print(f"python -m minidl.train: error: {problem}", file=sys.stderr, flush=True)
        return 1
    return 0


def diverged(result: dict[str, Any]) -> str | None:
    """What is not finite at the end of a run (the training loss, the scores), or None: a run that ends in inf or
    nan has failed, whatever it printed on the way (``--lr 1e30``), and says so with a non-zero status."""
    number = (int, float)
    scores = [f"{k} {v}" for k, v in result.items() if isinstance(v, number) and not math.isfinite(v)]
    train = result.get("history", {}).get("train", []) if isinstance(result.get("history"), dict) else []
    first = next((row[0] for row in train if isinstance(row[-1], number) and not math.isfinite(row[-1])), None)
    if not scores and first is None:
        return None
    where = [f"the training loss is nan or inf by step {first}"] if first is not None else []
    return f"the run diverged: {'; '.join(where + scores)} (a learning rate too high? --lr)"


if __name__ == "__main__":
    sys.exit(main())
