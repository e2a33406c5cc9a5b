"""ZeRO's memory and traffic per rank against P, measured, beside the formulas of the ZeRO paper.

Rajbhandari et al., "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" (2020): with
Psi parameters and K values of optimizer state per parameter (Adam: K = 2), each rank holds

    plain data parallelism (2 + K) Psi | stage 1: 2 Psi + K Psi / P | stage 2: Psi + (1 + K) Psi / P
    stage 3: (2 + K) Psi / P

values, and sends 2 Psi (P - 1) / P per step in DP and stages 1-2 (stage 3: + Psi (P - 1) / P per forward).
The model is the LSTM language model (Zaremba small without the softmax tying: ~4.6 M parameters, float32,
Adam), on P simulated ranks (threads, the same code as under mpiexec); bytes are those of the arrays each
rank holds after a step (``ZeroOptimizer.memory_bytes``), traffic what ``CountingComm`` counted.

    python benchmarks/zero.py [--ranks 1,2,4,8] [--vocab 10000 --hidden 200]
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402

import collectives  # noqa: E402
import minidl  # noqa: E402
import minidl.distributed as dist  # noqa: E402
import minidl.nn.functional as F  # noqa: E402
from minidl import optim  # noqa: E402
from minidl.models.lm import LSTMLanguageModel  # noqa: E402
from minidl.tools.info import print_header  # noqa: E402

K = 2  # Adam: exp_avg and exp_avg_sq


def one_step(comm, stage: int | None, vocab: int, hidden: int) -> dict:
    counting = dist.CountingComm(comm)
    dist.init(counting)
    minidl.manual_seed(0)
    model = LSTMLanguageModel(vocab, hidden, 2, dropout=0.0)
    base = optim.Adam(model.parameters(), lr=1e-3)
    opt = (
        dist.DistributedOptimizer(base, allreduce="ring")
        if stage is None
        else dist.ZeroOptimizer(base, stage, module=model)
    )
    words = np.random.default_rng(comm.Get_rank()).integers(0, vocab, size=(21, 4))
    logits, _ = model(words[:-1])
    F.cross_entropy(logits, words[1:].reshape(-1)).backward()
    counting.reset()
    opt.step()
    sent = counting.bytes_sent
    if stage is None:
        params = list(model.parameters())
        held = {
            "parameters": sum(p.data.nbytes for p in params),
            "gradients": sum(p.grad.nbytes for p in params),
            "optimizer_state": sum(
                v.nbytes for s in base.state.values() for v in s.values() if isinstance(v, np.ndarray)
            ),
        }
    else:
        held = opt.memory_bytes()
    return held | {"sent": sent, "psi": sum(p.data.size for p in model.parameters())}


def formula(stage: int | None, psi: float, p: int) -> float:
    """Values per rank (parameters + gradients + optimizer state), the ZeRO paper's Figure 1."""
    return {None: (2 + K) * psi, 1: 2 * psi + K * psi / p, 2: psi + (1 + K) * psi / p, 3: (2 + K) * psi / p}[stage]


def table(p: int, vocab: int = 10_000, hidden: int = 200) -> list[dict]:
    """Rank 0's bytes after a step at ``p`` ranks, per scheme (DP, ZeRO-1..3): held, the formula's, sent."""
    rows = []
    for stage in (None, 1, 2, 3):
        row = collectives.simulate(p, one_step, stage, vocab, hidden)[0]
        row["total"] = row["parameters"] + row["gradients"] + row["optimizer_state"]
        row["formula"] = 4 * formula(stage, row["psi"], p)
        rows.append(row | {"scheme": "DP" if stage is None else f"ZeRO-{stage}", "p": p})
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", default="1,2,4,8")
    ap.add_argument("--vocab", type=int, default=10_000)
    ap.add_argument("--hidden", type=int, default=200)
    args = ap.parse_args()
    print_header()
    print(
        f"{'P':>3} {'scheme':<8}{'params MB':>11}{'grads MB':>10}{'state MB':>10}{'total MB':>10}"
        f"{'formula MB':>12}{'sent MB/step':>14}"
    )
    for p in (int(r) for r in args.ranks.split(",")):
        for row in table(p, args.vocab, args.hidden):
            print(
                f"{p:>3} {row['scheme']:<8}{row['parameters'] / 1e6:>11.2f}{row['gradients'] / 1e6:>10.2f}"
                f"{row['optimizer_state'] / 1e6:>10.2f}{row['total'] / 1e6:>10.2f}{row['formula'] / 1e6:>12.2f}"
                f"{row['sent'] / 1e6:>14.2f}"
            )
    print("(rank 0 shown; stage 3's traffic excludes the next forward's parameter allgather, Psi (P-1)/P)")


if __name__ == "__main__":
    main()
