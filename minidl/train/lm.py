"""``python -m minidl.train lm``: train the Zaremba et al. (2014) LSTM language model.

    python -m minidl.train lm                                # generated corpus, --preset demo
    python -m minidl.train lm --preset small --data ~/ptb    # Zaremba's small model on real PTB files
    python -m minidl.train lm --text book.txt --epochs 5     # any UTF-8 text (split 80/10/10)
    mpiexec -n 2 python -m minidl.train lm --parallel data --allreduce ring --preset demo

The training is the paper's (``minidl.models.lm``): the corpus is cut into B parallel streams
(``batchify``) walked in windows of T words (``bptt_batches``); each window's loss is the mean
cross-entropy of its T*B next-word predictions; backpropagation stops at the window's start, but the
LSTM state carries over (detached) to the next window - truncated BPTT. Gradients are clipped to
global norm ``max_grad_norm``; plain SGD; the learning rate is ``lr`` for the first ``decay_after``
epochs and is multiplied by ``lr_decay`` every epoch after that.

On the generated corpus (``minidl.data.corpus_gen``: text from a hidden Markov model) the best
possible perplexity is known exactly, and the final line compares the test perplexity with it.

Data parallel: every rank takes its own B contiguous streams of the P*B-stream batchified corpus
(``batchify(ids, B, rank, P)``), carries its own LSTM state, and the gradients of its window are
averaged across ranks before clipping: P ranks with B streams each take the same steps as one
process with P*B streams.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import optim
from minidl.data.corpus_gen import generated_corpus
from minidl.data.text import Corpus, batchify, bptt_batches, num_bptt_batches, read_ptb, read_text_file
from minidl.models.lm import PRESETS as ZAREMBA_PRESETS
from minidl.models.lm import LMConfig, LSTMLanguageModel
from minidl.train import common
from minidl.train.common import Context

# Zaremba's small/medium/large (vocabulary 10,000 on PTB), plus two sized for this project's
# generated corpus (755 words, 300k training words, optimal test perplexity ~24.2):
#   demo  - within 15% of the optimum in a few minutes on one core (and under `make demo`);
#   quick - seconds, for tests and the tutorials' --quick mode (on the 20k-word "quick" corpus).
PRESETS: dict[str, LMConfig] = {
    **ZAREMBA_PRESETS,
    "demo": LMConfig(
        hidden_size=200,
        num_layers=1,
        num_steps=20,
        batch_size=20,
        dropout=0.0,
        init_scale=0.1,
        lr=4.0,
        lr_decay=0.5,
        decay_after=2,
        epochs=4,
        max_grad_norm=5.0,
    ),
    "quick": LMConfig(
        hidden_size=64,
        num_layers=1,
        num_steps=10,
        batch_size=10,
        dropout=0.0,
        init_scale=0.1,
        lr=5.0,
        lr_decay=0.5,
        decay_after=2,
        epochs=3,
        max_grad_norm=5.0,
    ),
}
# Which generated corpus (minidl.data.corpus_gen.CONFIGS) a preset trains on when no --data/--text is given.
GENERATED_CORPUS = {"quick": "quick"}

OVERRIDES = {
    "epochs": "epochs",
    "lr": "lr",
    "batch_size": "batch_size",
    "num_steps": "num_steps",
    "hidden_size": "hidden_size",
    "layers": "num_layers",
    "dropout": "dropout",
}


def build_parser(parser: argparse.ArgumentParser | None = None) -> argparse.ArgumentParser:
    parser = parser or argparse.ArgumentParser(prog="python -m minidl.train lm", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--preset", choices=sorted(PRESETS), default=None, help="model and schedule (default: demo; quick with --quick)"
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--data", metavar="DIR", help="a directory with ptb.train.txt, ptb.valid.txt, ptb.test.txt")
    source.add_argument("--text", metavar="FILE", help="any UTF-8 text file (split 80/10/10 by position)")
    parser.add_argument(
        "--corpus", choices=("quick", "default", "large"), help="size of the generated corpus (default: the preset's)"
    )
    model = parser.add_argument_group("model and schedule (override the preset)")
    model.add_argument("--num-steps", type=common.positive_int, help="BPTT window T (words)")
    model.add_argument("--hidden-size", type=common.positive_int)
    model.add_argument("--layers", type=common.positive_int)
    model.add_argument("--dropout", type=float)
    model.add_argument(
        "--eval-batch-size", type=common.positive_int, default=10, help="streams per rank when evaluating (default 10)"
    )
    common.add_common_arguments(parser, modes=("none", "data", "model", "tensor", "pipeline", "ps", "local-sgd"))
    # (these modules import this one, hence the late imports)
    from minidl.train.pipeline import add_arguments as add_pipeline_arguments
    from minidl.train.schemes import add_arguments as add_scheme_arguments

    add_pipeline_arguments(parser)
    add_scheme_arguments(parser)
    return parser


def load_corpus(args: argparse.Namespace, preset: str) -> Corpus:
    if args.data:
        return read_ptb(args.data)
    if args.text:
        return read_text_file(args.text)
    return generated_corpus(args.corpus or GENERATED_CORPUS.get(preset, "default"), seed=0)


def progress_line(epoch: int, window: int, steps_per_epoch: int, lr: float, mean_loss: float) -> str:
    """The start of a training progress line: where we are, the learning rate, loss and perplexity."""
    return (
        f"epoch {epoch} step {window}/{steps_per_epoch} | lr {lr:.3g} | loss {mean_loss:.3f} | "
        f"ppl {np.exp(mean_loss):.2f}"
    )


def score_line(result: dict[str, Any], corpus: Corpus) -> str:
    """ "test perplexity X | corpus optimum Y (gap Z%) | unigram U", adding optimal_ppl, unigram_ppl and gap to
    ``result`` when the corpus was generated (its true model is known); every --parallel mode reports this way."""
    line = f"test perplexity {result['test_ppl']:.2f}"
    if corpus.model is not None:
        result["optimal_ppl"] = corpus.optimal_perplexity("test")
        result["unigram_ppl"] = corpus.unigram_perplexity("test")
        result["gap"] = result["test_ppl"] / result["optimal_ppl"] - 1.0
        line += (
            f" | corpus optimum {result['optimal_ppl']:.2f} (gap {100 * result['gap']:+.1f}%)"
            f" | unigram {result['unigram_ppl']:.1f}"
        )
    return line


def evaluate(ctx: Context, model: LSTMLanguageModel, ids: np.ndarray, batch_size: int, num_steps: int) -> float:
    """Mean cross-entropy (nats/word) over ``ids``, each rank scoring its own streams; summed over ranks."""
    data = batchify(ids, batch_size, ctx.rank, ctx.size)
    model.eval()
    total, words = 0.0, 0
    with minidl.no_grad():
        state = model.init_hidden(batch_size)
        for x, y in bptt_batches(data, num_steps, drop_last=False):
            logits, state = model(x, state)
            total += float(F.cross_entropy(logits, y.reshape(-1), reduction="sum").data)
            words += y.size
    model.train()
    total, words = ctx.sum([total, words])
    return total / words


def train(ctx: Context, args: argparse.Namespace, preset: str, cfg: LMConfig) -> dict[str, Any]:
    program = common.split_program(ctx.mode, "lm")  # model, tensor, ps, local-sgd
    if program is not None:
        return program(ctx, args, preset, cfg)
    corpus = load_corpus(args, preset)
    if ctx.mode == "pipeline":  # layer pipelining, GPipe or 1F1B: minidl/train/pipeline.py
        from minidl.train.pipeline import run_lm

        if args.resume:
            raise ValueError("--resume is not supported with --parallel pipeline")
        return run_lm(args, ctx, cfg, corpus, preset)
    B, T = cfg.batch_size, cfg.num_steps
    train_data = batchify(corpus.train, B, ctx.rank, ctx.size)  # [time, B]: this rank's streams
    steps_per_epoch = num_bptt_batches(train_data.shape[0], T)
    if steps_per_epoch == 0:
        raise ValueError(
            f"the training split ({corpus.train.size} words) is too short for {ctx.size * B} streams "
            f"of windows of {T} words"
        )

    model = LSTMLanguageModel(
        len(corpus.vocab), cfg.hidden_size, cfg.num_layers, cfg.dropout, init_scale=cfg.init_scale
    )
    common.start_replicas(ctx, model, args.seed)
    params = list(model.parameters())
    opt = common.wrap_optimizer(ctx, optim.SGD(params, lr=cfg.lr), args)

    epoch, window, step = 1, 0, 0
    position_units = {"num_steps": T, "streams": ctx.size * B}  # what (epoch, window) counts in
    state = model.init_hidden(B)
    if args.resume:
        saved, mine = common.load_checkpoint(ctx, args.resume, model, opt, preset=preset, settings=position_units)
        epoch, window, step = int(saved["epoch"]), int(saved["window"]), int(saved["step"])
        if window and "h" in mine:
            state = (minidl.tensor(mine["h"].astype(params[0].dtype)), minidl.tensor(mine["c"].astype(params[0].dtype)))
    max_steps = args.max_steps or cfg.epochs * steps_per_epoch
    n_params = sum(p.data.size for p in params)
    common.print_header(
        ctx,
        f"LSTM language model, preset {preset!r}: {cfg.num_layers} x {cfg.hidden_size} LSTM, "
        f"{n_params:,} parameters ({args.dtype})",
        [
            f"corpus {corpus.name}: vocabulary {len(corpus.vocab):,}, train {corpus.train.size:,} words",
            f"B={B} streams/rank x T={T} steps, {steps_per_epoch} steps/epoch; SGD lr {cfg.lr} (x{cfg.lr_decay:.3g} "
            f"per epoch after {cfg.decay_after}), clip {cfg.max_grad_norm}, dropout {cfg.dropout}, {cfg.epochs} epochs"
            + (f", at most {max_steps} steps" if args.max_steps else ""),
        ]
        + ([f"resumed from {args.resume}: epoch {epoch}, step {step}"] if args.resume else []),
    )

    log_every = args.log_every or max(1, steps_per_epoch // 10)
    speed = common.Throughput("words", ctx.size, args.baseline_wps)
    split = common.TimingWindow(opt)
    loss_sum, loss_words = 0.0, 0
    started = time.perf_counter()
    valid_ppl = float("nan")
    history: dict[str, list] = {"train": [], "valid": []}  # (step, train ppl), (epoch, valid ppl)

    saved_at = step if args.resume else -1

    def checkpoint() -> None:
        nonlocal saved_at
        saved_at = step
        rank_state = {"h": state[0].data, "c": state[1].data}
        common.save_checkpoint(
            ctx,
            args.save,
            model,
            opt,
            {"epoch": epoch, "window": window, "step": step, "preset": preset, "settings": position_units},
            rank_state,
        )

    while epoch <= cfg.epochs and step < max_steps:
        common.set_lr(opt, cfg.lr_at(epoch))
        model.train()
        for i, (x, y) in enumerate(bptt_batches(train_data, T)):
            if i < window:
                continue  # a resumed run skips the windows it already trained on
            state = model.detach_state(state)
            logits, state = model(x, state)
            loss = F.cross_entropy(logits, y.reshape(-1))
            opt.zero_grad()
            loss.backward()
            common.synchronize(opt)  # average across ranks before clipping the global norm
            optim.clip_grad_norm(params, cfg.max_grad_norm)
            opt.step()
            window, step = i + 1, step + 1
            loss_sum, loss_words = loss_sum + float(loss.data) * y.size, loss_words + y.size
            speed.add(y.size)
            if step % log_every == 0 or step == max_steps:
                rate = speed.take()
                total, words = ctx.sum([loss_sum, loss_words])
                ctx.log(
                    progress_line(epoch, window, steps_per_epoch, cfg.lr_at(epoch), total / words)
                    + f" | {rate}{split.take()}"
                )
                history["train"].append((step, float(np.exp(total / words))))
                loss_sum, loss_words = 0.0, 0
            if step >= max_steps:
                break
        if window < steps_per_epoch:
            break  # stopped by --max-steps mid-epoch
        speed.pause()
        valid_ppl = float(np.exp(evaluate(ctx, model, corpus.valid, args.eval_batch_size, T)))
        history["valid"].append((epoch, valid_ppl))
        elapsed = common.format_duration(time.perf_counter() - started)
        ctx.log(f"epoch {epoch} done | valid ppl {valid_ppl:.2f} | {elapsed} elapsed")
        epoch, window, state = epoch + 1, 0, model.init_hidden(B)
        if args.save:
            checkpoint()
        common.restart_clocks(opt, speed)

    speed.pause()
    if args.save and saved_at != step:
        checkpoint()
    elapsed = time.perf_counter() - started
    test_loss = evaluate(ctx, model, corpus.test, args.eval_batch_size, T)
    result: dict[str, Any] = {
        "preset": preset,
        "steps": step,
        "epoch": epoch,
        "test_ppl": float(np.exp(test_loss)),
        "valid_ppl": valid_ppl,
        "seconds": elapsed,
        "words_per_s": speed.overall(),
        "ranks": ctx.size,
        "history": history,
        "params": common.snapshot(model),
    }
    line = score_line(result, corpus)
    common.print_footer(ctx, opt, args, line, step, elapsed, speed)
    return result


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``lm``/``cnn``), train, and return the run's numbers and final parameters."""
    return common.run_program(build_parser().parse_args(argv), train, PRESETS, OVERRIDES)
