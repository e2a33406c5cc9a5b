# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     name: python3
# ---

# %% [markdown]
# # 03 - An LSTM language model, trained towards the best possible perplexity
#
# A word-level language model reads text one word at a time and, after each word, gives a probability
# to every word of the vocabulary being the next one. Its quality is the **perplexity** on held-out text,
#
# $$\mathrm{ppl} = \exp\Big(-\frac1N \sum_{t=1}^{N} \log p(w_t \mid w_1, \dots, w_{t-1})\Big),$$
#
# the exponential of the mean cross-entropy: a model that always hesitated between k equally likely
# words would have perplexity k. Zaremba, Sutskever & Vinyals (2014) set the classic recipe on the Penn
# Treebank: an embedding, two LSTM layers, a linear decoder to the vocabulary, plain SGD with gradient
# clipping, and **truncated backpropagation through time**. That recipe is `minidl.models.LSTMLanguageModel`
# and the program `python -m minidl.train lm`.
#
# On real text nobody knows how low the perplexity could go. So minidl also ships a corpus *generated
# from a known hidden Markov model*, where the best possible perplexity is computable exactly: training can
# be measured against the optimum, not just against other models.
#
# In this lesson we
# 1. look at the generated corpus and its optimal perplexity;
# 2. cut it into parallel streams and BPTT windows (`batchify`, `bptt_batches`) and see what "truncated" means;
# 3. compare the readable LSTM cell (composed from autograd operations) with the fused whole-sequence
#    kernel (backward through time derived by hand): same numbers, different speed;
# 4. train the model and watch its perplexity approach the optimum;
# 5. run the same program on the real Penn Treebank files.
#
# `python tutorials/03_lstm_language_model.py` trains for a few minutes; `--quick` takes seconds.

# %%
import tempfile
import time
from pathlib import Path

import numpy as np

import minidl
from minidl import nn
from minidl.data.corpus_gen import generated_corpus
from minidl.data.text import batchify, bptt_batches, read_ptb
from minidl.tools import tutorial
from minidl.train import lm

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)

# %% [markdown]
# ## 1. A corpus with a known optimum
#
# The generator (`minidl/data/corpus_gen.py`) has a hidden state made of a *topic*, which changes only
# between sentences, and a *syntactic class*, which follows a sparse Markov chain; each class emits words
# from its own Zipf-distributed list, and content words depend on the topic. The topic of the last sentences
# predicts the next content word: a dependency longer than any fixed n-gram window, which an LSTM can carry
# in its state. The forward algorithm gives the exact probability of every test word under the true model,
# hence its perplexity: no model can do better on average.

# %%
corpus = generated_corpus("quick" if QUICK else "default")
optimum, unigram = corpus.optimal_perplexity("test"), corpus.unigram_perplexity("test")
print(corpus)
print("a sample:", " ".join(corpus.vocab.decode(corpus.train[:40])))
print(f"test perplexity of the true model (the optimum): {optimum:.2f}")
print(f"test perplexity of the unigram model (no context): {unigram:.1f}")

# %% [markdown]
# ## 2. Parallel streams and BPTT windows
#
# The training text is one long sequence of ids. `batchify(ids, B)` cuts it into B contiguous streams, the
# columns of a `[time, B]` matrix, so that a step processes B positions at once. `bptt_batches(data, T)`
# then walks down the matrix in windows of T rows: the input `x` is a window and the target `y` the same
# window shifted by one word.
#
# Here is the alphabet as a toy corpus, B = 4 streams, windows of T = 2 (the last two letters are dropped:
# 26 is not a multiple of 4; the last row is only ever a target):

# %%
letters = np.arange(26)
toy = batchify(letters, 4)
print("batchified [time, B] (column j is stream j):")
print(np.array([[chr(97 + i) for i in row] for row in toy]))
for k, (x, y) in enumerate(bptt_batches(toy, 2)):
    xs = " ".join("".join(chr(97 + i) for i in col) for col in x.T)
    ys = " ".join("".join(chr(97 + i) for i in col) for col in y.T)
    print(f"window {k}: x = {xs}   y = {ys}")

# %% [markdown]
# Stream 0 reads `a b | c d` (and `f` is its last target): each window continues where the previous one
# stopped, so the LSTM's state at the end of window k is the right initial state for window k + 1 and is
# passed on. But the *gradient*
# is not: backpropagation through all earlier windows would cost memory and time growing with the length
# of the text. **Truncated BPTT** cuts the graph at each window's start: the state keeps its value and
# loses its history (`detach()`).

# %%
minidl.manual_seed(0)
lstm = nn.LSTM(input_size=5, hidden_size=3)
x1, x2 = (minidl.tensor(np.random.default_rng(i).normal(size=(3, 2, 5)).astype(np.float32)) for i in (1, 2))
out1, state = lstm(x1)
out2, _ = lstm(x2, (state[0].detach(), state[1].detach()))
out2.sum().backward()
print("state after window 1 has a history:", state[0]._ctx is not None)
print(
    "its detached copy is a leaf, same values:",
    state[0].detach()._ctx is None,
    np.array_equal(state[0].detach().data, state[0].data),
)

# %% [markdown]
# ## 3. The LSTM twice: the readable cell and the fused kernel
#
# One LSTM step (gates in PyTorch's order i, f, g, o):
#
# $$[a^i, a^f, a^g, a^o] = x_t W_{ih}^\top + b_{ih} + h_{t-1} W_{hh}^\top + b_{hh}$$
# $$i = \sigma(a^i),\ f = \sigma(a^f),\ g = \tanh(a^g),\ o = \sigma(a^o), \qquad
#   c_t = f \odot c_{t-1} + i \odot g, \qquad h_t = o \odot \tanh(c_t).$$
#
# `nn.LSTMCell` writes exactly this with Tensor operations; autograd records about fifteen Functions per
# step and derives the backward pass. `nn.LSTM` runs a whole sequence through `nn.lstm_kernel.LSTMFunction`, one
# Function whose forward keeps the gate activations of every step and whose backward runs the recurrence
# backwards in time with the derivatives written out (e.g. $\partial c_{t-1} = \partial c_t \odot f +
# \dots$), one matrix product for all four gates. The two must agree; in float64 they do to rounding:


# %%
def composed(cell: nn.LSTMCell, x: minidl.Tensor) -> minidl.Tensor:
    """Run the cell step by step over x [T, B, I]; return the stacked h_t [T, B, H]."""
    h = c = minidl.tensor(np.zeros((x.shape[1], cell.hidden_size), x.dtype))
    outs = []
    for t in range(x.shape[0]):
        h, c = cell(x[t], (h, c))
        outs.append(h)
    return minidl.stack(outs)


def both(T: int, B: int, I: int, H: int, dtype=np.float64):
    """An LSTMCell and a one-layer LSTM with the same weights, and an input."""
    minidl.set_default_dtype(dtype)
    cell, fused = nn.LSTMCell(I, H), nn.LSTM(I, H)
    for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(fused, f"{name}_l0").data[...] = getattr(cell, name).data
    x = minidl.tensor(np.random.default_rng(0).normal(size=(T, B, I)).astype(dtype))
    return cell, fused, x


cell, fused, x = both(T=7, B=3, I=4, H=5)
out_cell = composed(cell, x)
out_fused, _ = fused(x)
(out_cell * out_cell).sum().backward()
(out_fused * out_fused).sum().backward()
print(f"max |h difference|                 {np.abs(out_cell.data - out_fused.data).max():.1e}")
for name in ("weight_ih", "weight_hh", "bias_ih"):
    diff = np.abs(getattr(cell, name).grad - getattr(fused, f"{name}_l0").grad).max()
    print(f"max |d loss / d {name} difference| {diff:.1e}")

# %% [markdown]
# Now the speed, at the size of Zaremba's small model (T = 20 steps, B = 20 streams, 200 units), float32,
# forward plus backward. The composed cell pays Python and graph overhead at every one of the T steps; the
# fused kernel does one input projection for the whole sequence and a fixed handful of NumPy calls per step.


# %%
def time_fwd_bwd(fn, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        out = fn()
        out.sum().backward()
        best = min(best, time.perf_counter() - start)
    return best


T, B, I, H = (10, 10, 50, 50) if QUICK else (20, 20, 200, 200)
cell, fused, x = both(T, B, I, H, np.float32)
t_cell = time_fwd_bwd(lambda: composed(cell, x), 3 if QUICK else 10)
t_fused = time_fwd_bwd(lambda: fused(x)[0], 3 if QUICK else 10)
print(
    f"T={T} B={B} H={H}: composed cell {1e3 * t_cell:.1f} ms, fused kernel {1e3 * t_fused:.1f} ms "
    f"({t_cell / t_fused:.1f}x)"
)
minidl.set_default_dtype(np.float32)

# %% [markdown]
# **Exercise 2** (`python -m minidl.exercises start lstm_cell_backward`): derive one LSTM step's backward by
# hand, the step the fused kernel repeats T times. The checker compares every gradient with what autograd
# derives for `nn.rnn.lstm_cell`, in float64: `python -m minidl.exercises check lstm_cell_backward`.

# %% [markdown]
# ## 4. Training towards the optimum
#
# `python -m minidl.train lm` is the whole loop; it is also a function, `lm.main(argv)`, which returns its
# numbers. Each step is:
#
# ```python
# state = model.detach_state(state)                      # truncated BPTT
# logits, state = model(x, state)                        # [T*B, V]
# loss = F.cross_entropy(logits, y.reshape(-1))          # mean over the T*B predictions
# opt.zero_grad(); loss.backward()
# optim.clip_grad_norm(params, max_grad_norm)            # Zaremba: 5
# opt.step()                                             # SGD
# ```
#
# and after each epoch the learning rate follows Zaremba's schedule (constant for `decay_after` epochs, then
# multiplied by `lr_decay` every epoch). The `demo` preset (one layer of 200 units, windows of 20 words,
# 20 streams, lr 4 halved every epoch after the second, four epochs) gets within about 5% of the optimal
# perplexity in a minute or two on one core; `quick` is a smaller model on a smaller corpus, for a run of
# seconds. Zaremba's lr of 1 works too but is slower here: the perplexity first drops to about the unigram
# level (the model learns word frequencies) and stays there for a while before the LSTM starts to use
# context; a larger rate (with clipping to keep it stable) shortens that plateau.

# %%
log_path = tutorial.out_dir() / "03_lm_log.jsonl"  # --log-json: one JSON line per progress step and evaluation
result = lm.main(["--preset", "quick" if QUICK else "demo", "--log-json", str(log_path)])
print(
    f"test perplexity {result['test_ppl']:.2f}, optimum {result['optimal_ppl']:.2f} "
    f"(gap {100 * result['gap']:.1f}%), unigram {result['unigram_ppl']:.1f}"
)

# %% [markdown]
# The curves below are drawn from that log, as a student would plot their own runs: `--log-json FILE`
# writes one JSON object per progress line (`"kind": "train"`: step, epoch, lr, loss, ppl, words/s and, in
# parallel runs, compute/wait/communication seconds) and one per evaluation (`"kind": "eval"`, the split).

# %%
import json  # noqa: E402

import matplotlib.pyplot as plt  # noqa: E402

records = [json.loads(line) for line in log_path.read_text().splitlines()]
train = [(r["step"], r["ppl"]) for r in records if r["kind"] == "train"]
valid = [(r["step"], r["ppl"]) for r in records if r["kind"] == "eval" and r["split"] == "valid"]
print(f"{len(records)} records in {log_path.name}; the first: {records[0]}")
steps_per_epoch = result["steps"] / max(len(valid), 1)
fig, ax = plt.subplots(figsize=(7, 4))
ax.plot([s / steps_per_epoch for s, _ in train], [p for _, p in train], label="training (running)")
ax.plot([s / steps_per_epoch for s, _ in valid], [p for _, p in valid], "o-", label="validation (end of epoch)")
ax.axhline(result["optimal_ppl"], color="k", ls="--", label=f"optimum {result['optimal_ppl']:.1f}")
ax.axhline(result["unigram_ppl"], color="gray", ls=":", label=f"unigram {result['unigram_ppl']:.0f}")
ax.set_yscale("log")
ax.set_xlabel("epoch")
ax.set_ylabel("perplexity")
ax.set_title("LSTM language model on the generated corpus")
ax.legend()
tutorial.show(fig, "03_lm_training.png")

# %% [markdown]
# ## 5. On the real Penn Treebank
#
# The PTB files of Mikolov's distribution (`ptb.train.txt`, `ptb.valid.txt`, `ptb.test.txt`: one sentence
# per line, 10,000-word vocabulary, rare words already `<unk>`) are read by `minidl.data.text.read_ptb`:
# whitespace tokens, `<eos>` at every line end, the vocabulary from the training file in Zaremba's order.
# minidl downloads nothing; point the program at the directory that holds them:
#
# ```
# python -m minidl.train lm --preset small  --data ~/data/ptb     # 2 x 200, 13 epochs, no dropout
# python -m minidl.train lm --preset medium --data ~/data/ptb     # 2 x 650, dropout 0.5, 39 epochs
# python -m minidl.train lm --preset large  --data ~/data/ptb     # 2 x 1500, dropout 0.65, 55 epochs
# python -m minidl.train lm --text any_book.txt --epochs 5         # any UTF-8 text, split 80/10/10
# mpiexec -n 4 python -m minidl.train lm --parallel data --allreduce ring --preset small --data ~/data/ptb
# ```
#
# The paper reports test perplexities of about 114 (small, non-regularized), 83 (medium) and 78 (large).
# Add `--save run.npz` to checkpoint after every epoch and `--resume run.npz` to continue exactly where a
# run stopped. Here is the reader on three tiny files in the same format:

# %%
with tempfile.TemporaryDirectory() as tmp:
    for split, text in {
        "train": "the cat sat on the mat\n the dog sat on the <unk>\n",
        "valid": "the cat sat on the dog\n",
        "test": "the dog sat on the mat\n",
    }.items():
        Path(tmp, f"ptb.{split}.txt").write_text(text)
    ptb = read_ptb(tmp)
    print(ptb)
    print("vocabulary in Zaremba's order (by count, then alphabetical):", ptb.vocab.words)
    print("test ids:", ptb.test.tolist())

# %% [markdown]
# ## What to remember
# - Perplexity is exp(mean cross-entropy); on the generated corpus we know the best possible value.
# - Batchify into B streams, walk windows of T; carry the state across windows, cut its gradient (truncated BPTT).
# - A fused kernel with a hand-derived backward is checked against the obvious composed version, then used.
# - Zaremba's recipe (SGD, clipping at 5, lr decay after a few epochs) takes the model close to the optimum.
