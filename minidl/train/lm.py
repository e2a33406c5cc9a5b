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
Under ``--parallel data`` rank r of P takes its own B contiguous streams of the P*B-stream corpus
(``batchify(ids, B, r, P)``) and carries its own LSTM state.
"""

from __future__ import annotations

import argparse
import itertools
from collections.abc import Iterator
from typing import Any

import numpy as np

import minidl
import minidl.nn.functional as F
from minidl import optim
from minidl.data.corpus_gen import generated_corpus
from minidl.data.text import Corpus, batchify, bptt_batches, num_bptt_batches, read_ptb, read_text_file
from minidl.distributed.usage import UsageExit, launch_rank, print_error
from minidl.models.lm import PRESETS as ZAREMBA_PRESETS
from minidl.models.lm import LMConfig, LSTMLanguageModel, Recurrent
from minidl.train import cli
from minidl.train.loop import Task

# Zaremba's small/medium/large (vocabulary 10,000 on PTB), plus two sized for the generated corpus
# (755 words, 300k training words, optimal test perplexity ~24.2): demo - within 15% of the optimum in a
# few minutes on one core (and under `make demo`); quick - seconds, on the 20k-word "quick" corpus.
_DEMO = ZAREMBA_PRESETS["small"].with_(num_layers=1, lr=4.0, decay_after=2, epochs=4)
PRESETS: dict[str, LMConfig] = {
    **ZAREMBA_PRESETS,
    "demo": _DEMO,
    "quick": _DEMO.with_(hidden_size=64, num_steps=10, batch_size=10, lr=5.0, epochs=3),
}
GENERATED_CORPUS = {"quick": "quick"}  # the generated corpus a preset trains on without --data/--text
OVERRIDES = {f: f for f in ("epochs", "lr", "batch_size", "num_steps", "hidden_size", "dropout")} | {
    "layers": "num_layers"
}


def load_corpus(args: argparse.Namespace, preset: str) -> Corpus:
    if args.data:
        return read_ptb(args.data)
    if args.text:
        return read_text_file(args.text)
    return generated_corpus(args.corpus or GENERATED_CORPUS.get(preset, "default"), seed=0)


class LMTask(Task):
    """Train the LSTM language model on a corpus (generated, PTB or any text)."""

    name, unit, modes = "lm", "words", ("data", "zero", "model", "tensor", "pipeline", "ps", "local-sgd")
    PRESETS, OVERRIDES, lines_per_epoch, epoch_split, evaluates_last_epoch = PRESETS, OVERRIDES, 10, "valid", True
    history_keys, split_softmax = ("ppl",), True  # tensor parallel: the softmax split by vocabulary
    MODEL_FIELDS = ("hidden_size", "num_layers", "vocab_size")
    batch_axis = 1  # windows are [T, B]: micro-batches are groups of streams

    @staticmethod
    def add_arguments(parser: argparse.ArgumentParser) -> None:
        source = parser.add_mutually_exclusive_group()
        source.add_argument("--data", metavar="DIR", help="a directory with ptb.train.txt, ptb.valid.txt, ptb.test.txt")
        source.add_argument("--text", metavar="FILE", help="any UTF-8 text file (split 80/10/10 by position)")
        parser.add_argument("--corpus", choices=("quick", "default", "large"), help="size of the generated corpus")
        model = parser.add_argument_group("model and schedule (override the preset)")
        model.add_argument("--num-steps", type=cli.positive_int, help="BPTT window T (words)")
        model.add_argument("--hidden-size", type=cli.positive_int)
        model.add_argument("--layers", type=cli.positive_int)
        model.add_argument("--dropout", type=float)
        model.add_argument("--eval-batch-size", type=cli.positive_int, default=10, help="streams per rank, evaluating")

    def __init__(self, args: argparse.Namespace, cfg: LMConfig, preset: str):
        self.args, self.max_grad_norm = args, cfg.max_grad_norm
        self.corpus = load_corpus(args, preset)
        self.cfg = cfg.with_(vocab_size=len(self.corpus.vocab))  # the corpus's, not the preset's (PTB's 10,000)

    @classmethod
    def configured(cls, args: argparse.Namespace, cfg: LMConfig, preset: str) -> LMConfig:
        """The settings the run uses (``--print-config``): the vocabulary is the corpus's."""
        return cfg.with_(vocab_size=len(load_corpus(args, preset).vocab))

    def prepare(self, shard: tuple[int, int]) -> int:
        """This rank's streams of the training split; returns the windows per epoch. Streams more than a split
        has words (``--batch-size``, ``--eval-batch-size``) are one line naming the flag, before any training."""
        B, T, world = self.cfg.batch_size, self.cfg.num_steps, shard[1]
        too_many_streams(self.corpus.train.size, B * world, "--batch-size", "the training split", world)
        for split in ("valid", "test"):
            too_many_streams(getattr(self.corpus, split).size, self.args.eval_batch_size * world,
                             "--eval-batch-size", f"the {split} split", world)  # fmt: skip
        self.train = batchify(self.corpus.train, B, *shard)
        if num_bptt_batches(self.train.shape[0], T) == 0:
            n = self.corpus.train.size
            raise ValueError(
                f"the training split ({n} words) is too short for {shard[1] * B} streams of windows of {T} words"
            )
        return num_bptt_batches(self.train.shape[0], T)

    def steps_per_epoch(self, global_batch: int) -> int:
        """Windows per epoch of a run whose ranks together take ``global_batch`` streams (``prepare``'s count)."""
        return num_bptt_batches(self.corpus.train.size // global_batch, self.cfg.num_steps)

    def size_flags(self) -> str:
        return f"--hidden-size {self.cfg.hidden_size}, --layers {self.cfg.num_layers}"

    def model(self) -> LSTMLanguageModel:
        c = self.cfg
        return LSTMLanguageModel(
            len(self.corpus.vocab),
            c.hidden_size,
            c.num_layers,
            c.dropout,
            init_scale=c.init_scale,
            sparse_embedding=bool(getattr(self.args, "sparse_embedding", False)),
        )

    def chain(self, model: Any) -> list:
        units = super().chain(model)
        self.recurrent = [u for _, u in units if isinstance(u, Recurrent)]  # they carry the LSTM state
        return units

    def start_window(self, again: bool = False) -> None:
        for u in self.recurrent:
            u.restart_window() if again else u.start_window()

    def set_slots(self, slots: int) -> None:
        for u in self.recurrent:
            u.reset(slots)

    def optimizer(self, params: list) -> optim.Optimizer:
        return optim.SGD(params, lr=self.cfg.lr)

    def lr(self, step: int, per_epoch: int) -> float:
        return self.cfg.lr_at(1 + step // per_epoch)

    def batches(self, epoch: int, start: int) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The epoch's windows from ``start`` on; a new epoch starts from zero states."""
        for u in self.recurrent if start == 0 else ():
            u.reset()
        return itertools.islice(bptt_batches(self.train, self.cfg.num_steps), start, None)

    def forward(self, net: Any, batch: tuple, again: bool = False, start: bool = True) -> Any:
        """Logits of a window from the carried state (``again``: once more from the window's start state;
        ``start=False``: the next micro-batch of the same window, on the next carried slot)."""
        if start:
            self.start_window(again)
        return net(batch[0])

    def criterion(self, out: Any, batch: tuple) -> Any:
        return F.cross_entropy(out, batch[1].reshape(-1))

    def tally(self, loss: float, batch: tuple) -> np.ndarray:
        return np.array([loss * batch[1].size, batch[1].size])

    def train_record(self, sums: np.ndarray) -> dict[str, float]:
        return {"loss": float(sums[0] / max(sums[1], 1)), "ppl": float(np.exp(sums[0] / max(sums[1], 1)))}

    def progress_text(self, r: dict[str, Any], pos: Any, spe: int) -> str:
        return (
            f"epoch {pos.epoch} step {pos.window}/{spe} | lr {r['lr']:.3g} | loss {r['loss']:.3f} | ppl {r['ppl']:.2f}"
        )

    def evaluate(self, strategy: Any, split: str) -> dict[str, float]:
        """Mean cross-entropy (nats/word) and perplexity of ``split``; each rank its share of the streams."""
        streams = max(self.args.eval_batch_size, strategy.min_streams)
        data = batchify(getattr(self.corpus, split), streams, *strategy.eval_share)
        carried, total, words = [(u.states, u.begin) for u in self.recurrent], 0.0, 0.0
        self.set_slots(self.recurrent[0].slots)  # evaluation starts from zero states
        strategy.net.eval()
        with minidl.no_grad():
            for x, y in bptt_batches(data, self.cfg.num_steps, drop_last=False):
                _, loss = strategy.eval_loss(self, (x, y))
                if loss is not None and strategy.reports:
                    total, words = total + float(getattr(loss, "data", loss)) * y.size, words + y.size
        strategy.net.train()
        for u, (states, begin) in zip(self.recurrent, carried):
            u.states, u.begin = states, begin
        total, words = strategy.ctx.sum([total, words])
        return {f"{split}_loss": float(total / words), f"{split}_ppl": float(np.exp(total / words))}

    def eval_text(self, split: str, scores: dict[str, Any]) -> tuple[float, str]:
        """The number the history keeps, and the text of an evaluation."""
        return scores[f"{split}_ppl"], f"{split} ppl {scores[f'{split}_ppl']:.2f}"

    def verdict(self, result: dict[str, Any]) -> list[str]:
        """On a generated corpus, what the gap to the optimum means: within 10% is good, within 25% fair (the
        presets' runs); 0% is the generating HMM itself, which a model learned from a finite sample of text in a
        finite number of SGD steps does not reach (the rare words of the Zipf tail are seen a few times; the
        topic and word class, which the HMM knows, must be inferred from the words)."""
        if "gap" not in result:
            return []
        gap = result["gap"]
        grade = "good" if gap <= 0.10 else "fair" if gap <= 0.25 else "far: train longer or a larger model"
        return [
            f"gap {100 * gap:+.1f}%: {grade} (within 10% is good, within 25% fair). 0% is the HMM that wrote the "
            f"text, reached only with unlimited text and training: this model took {result['steps']:,} SGD steps on "
            f"{self.corpus.train.size:,} words of text (the rare ones seen a few times) and must infer from the words "
            "the topic and word class that the HMM knows"
        ]

    def score_line(self, result: dict[str, Any]) -> str:
        """ "test perplexity X | corpus optimum Y (gap Z%) | unigram U"; the optimum and unigram perplexities
        (added to ``result``) only where the corpus was generated, its true model known."""
        line, c = f"test perplexity {result['test_ppl']:.2f}", self.corpus
        if c.model is not None:
            result |= {"optimal_ppl": c.optimal_perplexity("test"), "unigram_ppl": c.unigram_perplexity("test")}
            result["gap"] = result["test_ppl"] / result["optimal_ppl"] - 1.0
            line += f" | corpus optimum {result['optimal_ppl']:.2f} (gap {100 * result['gap']:+.1f}%)"
            line += f" | unigram {result['unigram_ppl']:.1f}"
        return line

    def header(self, preset: str, n_params: int, spe: int, max_steps: int | None) -> tuple[str, list[str]]:
        c, corpus, most = self.cfg, self.corpus, f", at most {max_steps} steps" if max_steps else ""
        return (
            f"LSTM language model, preset {preset!r}: {c.num_layers} x {c.hidden_size} LSTM, {n_params:,} parameters ({self.args.dtype})",
            [
                f"corpus {corpus.name}: vocabulary {len(corpus.vocab):,}, train {corpus.train.size:,} words",
                f"B={c.batch_size} streams/rank x T={c.num_steps} steps, {spe} steps/epoch; SGD lr {c.lr * self.lr_scale:g} (x{c.lr_decay:.3g} "
                f"per epoch after {c.decay_after}), clip {c.max_grad_norm}, dropout {c.dropout}, {c.epochs} epochs{most}",
            ],
        )

    def carried_state(self) -> dict[str, np.ndarray]:
        """Each layer's (h, c) [L, B, H] (``Recurrent.carried``: its slots' streams joined in order)."""
        states = [u.carried() for u in self.recurrent]
        return {} if None in states else {k: np.stack([s[i] for s in states]) for i, k in enumerate("hc")}

    def reshard_state(self, states: list[dict[str, Any]], size: int) -> list[dict[str, Any]]:
        """The LSTM state [layers, B, H] of P ranks' contiguous streams, joined in global stream order and cut
        into ``size`` equal parts (rank r of Q holds global streams r*G/Q .. (r+1)*G/Q - 1, as ``batchify``)."""
        if not any(states):
            return [{} for _ in range(size)]
        joined = {k: np.concatenate([s[k] for s in states], axis=1) for k in "hc"}
        parts = {k: np.split(v, size, axis=1) for k, v in joined.items()}
        return [{k: parts[k][r] for k in "hc"} for r in range(size)]

    def restore_state(self, saved: dict[str, np.ndarray]) -> None:
        for k, u in enumerate(self.recurrent):
            u.restore(*((saved["h"][k], saved["c"][k]) if saved else ()))


def too_many_streams(words: int, streams: int, flag: str, split: str, world: int) -> None:
    """Exit 2 with one line (printed once: every rank finds the same) where ``split`` cannot be cut into ``streams``."""
    if streams > words:
        per_rank = f" x {world} ranks" if world > 1 else ""
        if launch_rank() == 0:
            print_error(
                f"python -m minidl.train: error: {flag}: {streams // world} streams{per_rank} is more than {split} "
                f"has words ({words})"
            )
        raise UsageExit()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Parse ``argv`` (the flags after ``lm``), train, and return the run's numbers and final parameters."""
    return cli.run(LMTask, argv)
