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
# # 09 - Large batches, a timeline of the step, and mixed precision
#
# Data parallelism on P ranks multiplies the global batch by P. On 256 CPU nodes (Hemsoth, "Scaling with Accuracy
# on CPU-Only HPC Infrastructure", The Next Platform, 2018) a per-node batch of 32 is a global batch of 8192, and
# the question stops being speed: does the model still reach the same accuracy in the same number of epochs?
#
# 1. Final accuracy against the global batch, 64 to 8192, for plain SGD, SGD with the **linear scaling rule and
#    warmup** (Goyal et al., "Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour", 2017) and **LARS** (You,
#    Gitman & Ginsburg, "Large Batch Training of Convolutional Networks", 2017). `python -m minidl.train` has the
#    same rule as `--lr-scaling linear --warmup-epochs K`; `optim.LAMB` is LARS's Adam-based sibling.
# 2. Batch norm at 2 images per rank, with and without SyncBatchNorm (and ghost batch norm: Hoffer et al., "Train
#    longer, generalize better", 2017).
# 3. Where a data-parallel step's time goes: a `--timeline` trace drawn with matplotlib.
# 4. Mixed precision emulated on a CPU: small gradients underflow in fp16 without loss scaling; the LM in fp16 with
#    dynamic scaling and in bf16 ends near fp32's perplexity.
#
# **How a global batch of 8192 runs on one machine.** Gradient accumulation on one process
# (`minidl.train.batch_study`): the B images of a step are cut into micro-batches of 64, each one's mean loss is
# scaled by 64 / B and backpropagated, and the gradients add up to the mean over the B images: the same gradient
# that P ranks x b images x A passes of `DistributedOptimizer(backward_passes_per_step=A)` produce. Batch norm
# normalizes each micro-batch on its own, as each rank would its own images. Every run sees the same number of
# images (a fixed epoch budget): a larger batch takes fewer, larger steps.
#
# Run: `python tutorials/09_large_batches.py` (`--quick` for a run of well under a minute with fewer batch sizes,
# images and epochs).

# %%

import matplotlib.pyplot as plt
import numpy as np

from minidl import tutorial
from minidl.train.batch_study import RECIPES, Setting, images, norm_study, rate, sweep

QUICK = tutorial.quick()
BATCHES = [64, 512] if QUICK else [64, 512, 4096, 8192]
EPOCHS, N_TRAIN = (2, 1024) if QUICK else (4, 8192)
data = images(N_TRAIN)
print(f"{N_TRAIN} training images {data.x_train.shape[1:]}, {len(data.classes)} labels; {EPOCHS} epochs per run")

# %% [markdown]
# ## 1. The learning rate of each recipe
#
# The linear rule: at k = B / 64 times the base batch, k times the base rate; over the first epoch it ramps up
# linearly from the base rate (the first steps at the full rate diverge), then a cosine decay to 0.

# %%
fig, ax = plt.subplots(figsize=(6, 3))
for b in BATCHES[1:]:
    s = Setting(recipe="linear", global_batch=b)
    per_epoch = N_TRAIN // b
    steps = EPOCHS * per_epoch
    ax.plot(np.arange(steps) / per_epoch, [rate(s, t, steps, per_epoch) for t in range(steps)], "o-", label=f"B={b}")
ax.axhline(Setting().lr, color="k", ls=":", label="base rate (B=64)")
ax.set(xlabel="epoch", ylabel="learning rate", yscale="log", title="linear scaling + warmup + cosine")
ax.legend()
tutorial.show(fig, "09_lr_schedule.png")

# %% [markdown]
# ## 2. Final accuracy against the global batch
#
# Per-label test accuracy (the share of the image x label yes/no decisions that are right; answering "no"
# everywhere scores about 60%).

# %%
results = sweep(data, BATCHES, epochs=EPOCHS)
table = {(r["setting"].global_batch, r["setting"].recipe): 100 * r["accuracy"] for r in results}
print(f"{'global batch':>12} {'steps':>6} " + " ".join(f"{name:>8}" for name in RECIPES))
for b in BATCHES:
    steps = EPOCHS * (N_TRAIN // b)
    print(f"{b:>12} {steps:>6} " + " ".join(f"{table[b, name]:8.2f}" for name in RECIPES))

fig, ax = plt.subplots(figsize=(6, 3.5))
for name in RECIPES:
    ax.plot(BATCHES, [table[b, name] for b in BATCHES], "o-", label=name)
ax.set(xscale="log", xlabel="global batch", ylabel="test per-label accuracy %", title=f"{EPOCHS} epochs each")
ax.legend()
tutorial.show(fig, "09_accuracy_vs_batch.png")

# %%
small, large = BATCHES[0], BATCHES[-1]
for name in RECIPES:
    print(f"{name:>7}: {table[small, name]:.2f}% at B={small} -> {table[large, name]:.2f}% at B={large}")

# %% [markdown]
# What the table says: at the same number of epochs, plain SGD at B = 8192 takes 128 times fewer steps at the same
# rate, and stays far behind. Scaling the rate with the batch gives those few steps back their length, and the
# warmup keeps the first ones from diverging; Goyal et al. found the rule holds up to about 8k images on ImageNet
# and breaks beyond. LARS sets each layer's step to a fixed fraction of its weights, which is what lets the
# largest batches take a large rate without some layers diverging. (One seed per cell: differences of a point or
# two are noise; `benchmarks/large_batch.py --seeds 5` prints medians and spreads.)
#
# ## 3. Batch norm at 2 images per rank
#
# 16 ranks with 2 images each. Batch norm per rank normalizes each image pair by its own mean and variance:
# statistics from 2 samples are mostly noise. SyncBatchNorm allreduces the sums, so every rank normalizes by the
# statistics of all 32. On one process, per-rank batch norm is `nn.GhostBatchNorm2d(c, 2)` over the global batch
# (the same normalization, tested against BatchNorm2d applied to each pair) and SyncBatchNorm is one
# `BatchNorm2d` over the 32.

# %%
norms = norm_study(data, epochs=EPOCHS)
for name, r in norms.items():
    print(f"{name:>14}: test per-label accuracy {100 * r['accuracy']:.2f}%, last training loss {r['train_loss']:.4f}")
fig, ax = plt.subplots(figsize=(4, 3))
ax.bar(list(norms), [100 * r["accuracy"] for r in norms.values()], color=["tab:red", "tab:green"])
ax.set(ylabel="test per-label accuracy %", title="batch norm, 2 images per rank, 16 ranks")
tutorial.show(fig, "09_batch_norm_per_rank.png")
