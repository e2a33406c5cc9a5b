"""Words/s of one LSTM language-model training step: minidl vs PyTorch CPU, one thread each.

The model is Zaremba et al.'s "small" configuration: vocabulary 10,000, 2 LSTM layers of 200 units,
BPTT window T=20, batch B=20, so one step trains on T*B = 400 words. A step is what training does:

    forward (embedding -> LSTM -> decoder), F.cross_entropy over [400, 10000] logits, backward,
    clip_grad_norm(params, 5), SGD(lr=1).step(), and the state carried (detached) to the next window.

Each framework runs in its own subprocess (so peak RSS is its own) with OMP/OpenBLAS/MKL threads = 1
and ``torch.set_num_threads(1)``. Words/s come from the median step time of a run, in wall-clock and in
CPU seconds of the process; the two frameworks run alternately ``--repeats`` (>= 5) times. Prints the
median words/s over the runs with their spread (min-max), in CPU time and wall clock, the ratio of the
medians, the per-run ratios, and peak RSS.

Both run under the glibc malloc thresholds that ``import minidl`` sets (minidl/tools/memory.py), and PyTorch
runs once more per round under glibc's defaults ("torch-glibc"), as a PyTorch user's process would:
the first ratio compares the frameworks' own work, the second what each gives out of the box.

The header is ``minidl.info``'s (the BLAS kernel, CPU ISA, sgemm GFLOP/s). After the first round's timed steps
minidl's child clocks ``--split`` more steps op by op (benchmarks/op_clock.py): the decoder's linear layer and
each LSTM layer as ms per step, GFLOP/s and a % of the sgemm peak measured in that process, their share of the
step, and the rest (cross-entropy, embedding; the optimizer, clipping and autograd outside the ops).

    python benchmarks/lstm_lm.py                 # both, default sizes
    python benchmarks/lstm_lm.py --steps 50 --preset medium
    python benchmarks/lstm_lm.py --profile       # minidl only, with a cProfile of the step
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from harness import TORCH_GLIBC, peak_rss_mb, report, spawn, time_steps  # sets the BLAS threads to 1
from op_clock import split_report

from minidl.tools.info import print_header

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _result(impl: str, times: list[tuple[float, float]], words: int, loss: float, split: list[str]) -> dict:
    """Words/s from the median step time, wall-clock and CPU (the process's own CPU seconds, which do not
    count the time the OS gave its core to someone else: the fairer number on a shared machine)."""
    import numpy as np

    wall, cpu = np.median(np.array(times), axis=0)
    return {
        "impl": impl,
        "words_per_s": words / wall,
        "ms_per_step": 1e3 * wall,
        "cpu_words_per_s": words / cpu,
        "cpu_ms_per_step": 1e3 * cpu,
        "loss": loss,
        "peak_rss_mb": peak_rss_mb(),
        "split": split,
    }


def _tokens(vocab: int, T: int, B: int, n: int):
    """n + 1 windows of random token ids [T, B] (speed does not depend on the values)."""
    import numpy as np

    return np.random.default_rng(0).integers(0, vocab, size=(n + 1, T + 1, B))


def run_minidl(cfg: dict, steps: int, warmup: int, profile: bool, split: int = 0) -> dict:
    sys.path.insert(0, ROOT)
    import minidl
    import minidl.nn.functional as F
    from minidl import optim
    from minidl.models import LSTMLanguageModel

    minidl.random.manual_seed(0)
    model = LSTMLanguageModel(
        cfg["vocab_size"], cfg["hidden_size"], cfg["num_layers"], cfg["dropout"], init_scale=cfg["init_scale"]
    )
    params = list(model.parameters())
    opt = optim.SGD(params, lr=cfg["lr"])
    T, B = cfg["num_steps"], cfg["batch_size"]
    data = _tokens(cfg["vocab_size"], T, B, warmup + steps)
    state = model.init_hidden(B)

    def step(i: int):
        nonlocal state
        x, y = data[i, :-1], data[i, 1:]
        state = model.detach_state(state)
        logits, state = model(x, state)
        loss = F.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        optim.clip_grad_norm(params, cfg["max_grad_norm"])
        opt.step()
        return loss.item()

    if profile:
        import cProfile
        import pstats
        import time

        prof = cProfile.Profile(time.process_time)
        prof.enable()
    times, loss = time_steps(step, warmup, steps)
    if profile:
        prof.disable()
        pstats.Stats(prof, stream=sys.stderr).sort_stats("tottime").print_stats(18)
        if os.environ.get("MINIDL_PROFILE_CALLERS"):
            pstats.Stats(prof, stream=sys.stderr).print_callers(os.environ["MINIDL_PROFILE_CALLERS"])
    return _result("minidl", times, T * B, loss, split_report(step, split) if split else [])


def run_torch(cfg: dict, steps: int, warmup: int) -> dict:
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)

    class LM(torch.nn.Module):
        def __init__(self):
            super().__init__()
            V, H, L = cfg["vocab_size"], cfg["hidden_size"], cfg["num_layers"]
            self.embedding = torch.nn.Embedding(V, H)
            self.drop = torch.nn.Dropout(cfg["dropout"])
            self.lstm = torch.nn.LSTM(H, H, L, dropout=cfg["dropout"])
            self.decoder = torch.nn.Linear(H, V)
            for p in self.parameters():
                torch.nn.init.uniform_(p, -cfg["init_scale"], cfg["init_scale"])

        def forward(self, x, state):
            out, state = self.lstm(self.drop(self.embedding(x)), state)
            return self.decoder(self.drop(out).reshape(-1, out.shape[-1])), state

    model = LM()
    opt = torch.optim.SGD(model.parameters(), lr=cfg["lr"])
    T, B, L, H = cfg["num_steps"], cfg["batch_size"], cfg["num_layers"], cfg["hidden_size"]
    data = torch.from_numpy(_tokens(cfg["vocab_size"], T, B, warmup + steps))
    state = (torch.zeros(L, B, H), torch.zeros(L, B, H))

    def step(i: int):
        nonlocal state
        x, y = data[i, :-1], data[i, 1:]
        state = tuple(s.detach() for s in state)
        logits, state = model(x, state)
        loss = torch.nn.functional.cross_entropy(logits, y.reshape(-1))
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg["max_grad_norm"])
        opt.step()
        return loss.item()

    times, loss = time_steps(step, warmup, steps)
    return _result("torch", times, T * B, loss, [])


def _config(preset: str) -> dict:
    sys.path.insert(0, ROOT)
    from minidl.models import PRESETS

    return PRESETS[preset].as_dict()


def _child(args) -> None:
    cfg = _config(args.preset)
    if args.impl == "minidl":
        result = run_minidl(cfg, args.steps, args.warmup, args.profile, args.split)
    else:
        result = run_torch(cfg, args.steps, args.warmup)
    print(json.dumps(result))


def _spawn(impl: str, args, split: int = 0) -> dict | None:
    child = "torch" if impl == TORCH_GLIBC else impl
    return spawn(
        __file__,
        ["--child", child, "--preset", args.preset, "--steps", str(args.steps), "--warmup", str(args.warmup)]
        + (["--profile"] if args.profile else [])
        + (["--split", str(split)] if split else []),
        glibc_defaults=impl == TORCH_GLIBC,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--preset", default="small", choices=["small", "medium", "large"])
    parser.add_argument("--steps", type=int, default=30, help="timed training steps")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=5, help="alternating runs of each (medians over them)")
    parser.add_argument("--profile", action="store_true", help="cProfile the minidl step (minidl only)")
    parser.add_argument("--split", type=int, default=5, help="clocked steps of the op split (first round; 0: none)")
    parser.add_argument("--child", choices=["minidl", "torch"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        args.impl = args.child
        _child(args)
        return
    print_header()
    cfg = _config(args.preset)
    print(
        f"LSTM LM '{args.preset}': vocab {cfg['vocab_size']}, {cfg['num_layers']} x {cfg['hidden_size']}, "
        f"T={cfg['num_steps']}, B={cfg['batch_size']}; {args.repeats} interleaved runs of {args.steps} steps, 1 thread"
    )
    impls = ["minidl"]
    try:
        import torch  # noqa: F401

        if not args.profile:
            impls += ["torch", TORCH_GLIBC]
    except ImportError:
        print("PyTorch not installed: timing minidl only")
    # Alternate the two, `repeats` times: on a shared machine the load changes from minute to minute,
    # and interleaving exposes both to the same conditions.
    rounds = [
        {name: _spawn(name, args, split=args.split if r == 0 and name == "minidl" else 0) for name in impls}
        for r in range(args.repeats)
    ]
    print("CPU time (the process's own CPU seconds: the fairer number on a shared machine):")
    report(rounds, impls, "cpu_words_per_s", "words/CPU-s", target=1.1)
    print("wall clock:")
    report(rounds, impls, "words_per_s", "words/s", target=1.1)
    if rounds[0].get("minidl") and rounds[0]["minidl"]["split"]:
        print(f"minidl's step by op, {args.split} clocked steps after round 1's timed ones:")
        print("\n".join(rounds[0]["minidl"]["split"]))


if __name__ == "__main__":
    main()
