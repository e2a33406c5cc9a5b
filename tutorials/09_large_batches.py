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
# 5. The article's experiment: minidl's own ResNet-50 (torchvision's layout), its step measured here, simulated
#    data-parallel on 1 to 256 nodes of an Omni-Path network; and the accuracy at the global batches (800 to 2000)
#    where the article met trouble.
#
# **How a global batch of 8192 runs on one machine.** Gradient accumulation on one process
# (`benchmarks/large_batch_study.py`): the B images of a step are cut into micro-batches of 64, each one's mean
# loss is scaled by 64 / B and backpropagated, and the gradients add up to the mean over the B images: the same gradient
# that P ranks x b images x A passes of `DistributedOptimizer(backward_passes_per_step=A)` produce. Batch norm
# normalizes each micro-batch on its own, as each rank would its own images. Every run sees the same number of
# images (a fixed epoch budget): a larger batch takes fewer, larger steps.
#
# Run: `python tutorials/09_large_batches.py` (`--quick` for a run of well under a minute with fewer batch sizes,
# images and epochs).

# %%
import os
import subprocess
import sys
import tempfile

import matplotlib.pyplot as plt
import numpy as np

from minidl import amp, nn
from minidl.distributed import timeline
from minidl.tools import tutorial
from minidl.train import lm

# the study (ResNet-8 at a global batch B by gradient accumulation) lives with the benchmark that runs it at scale
sys.path.insert(0, str(tutorial.TUTORIALS.parent / "benchmarks"))
from large_batch_study import RECIPES, Setting, images, norm_study, rate, sweep, train  # noqa: E402

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

TRIVIAL = 100 * float(np.mean(data.y_test < 0.5))  # answering "no" to every label
fig, ax = plt.subplots(figsize=(6, 3.5))
for name in RECIPES:
    ax.plot(BATCHES, [table[b, name] for b in BATCHES], "o-", label=name)
ax.axhline(TRIVIAL, color="k", ls=":", label=f'all "no": {TRIVIAL:.0f}%')
ax.set(xscale="log", xlabel="global batch", ylabel="test per-label accuracy %", title=f"{EPOCHS} epochs each")
tutorial.quick_note(ax, f'{EPOCHS} epochs of {N_TRAIN} images: too short to learn beyond all-"no"')
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
ax.axhline(TRIVIAL, color="k", ls=":")
ax.set(ylabel="test per-label accuracy %", title="batch norm, 2 images per rank, 16 ranks")
tutorial.quick_note(ax, 'dotted: all "no"; too short to part them')
tutorial.show(fig, "09_batch_norm_per_rank.png")

# %% [markdown]
# ## 4. Where the step's time goes: a timeline
#
# `--timeline FILE` writes a Chrome trace (open it in https://ui.perfetto.dev): on every rank the forward, the
# backward, the update, and each gradient bucket's allreduce, here with `--overlap` on a communication thread
# while the backward still runs. The same file, drawn with matplotlib: one row per rank and thread.

# %%
launcher = tutorial.mpiexec()
trace = os.path.join(tempfile.mkdtemp(), "timeline.json")
command = [launcher or "mpiexec", "-n", "2", sys.executable, "-m", "minidl.train", "lm", "--quick", "--parallel"]
command += ["data", "--overlap", "--timeline", trace, "--max-steps", "5", "--log-every", "5"]
if launcher is None:
    print("no mpiexec here: this section needs one (pip install mpich, or the cluster's MPI); skipped")
    events = []
else:
    env = dict(os.environ, MPLBACKEND="Agg", PYTHONPATH=str(tutorial.TUTORIALS.parent))
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tutorial.TUTORIALS.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-3000:]}")
    events = timeline.load(trace)
    print(f"{len(events)} spans from {len({e['pid'] for e in events})} ranks")

# %%
if events:
    colours = {"forward": "tab:blue", "backward": "tab:orange", "allreduce": "tab:red", "update": "tab:green"}
    colours |= {"clip": "tab:purple", "wait": "0.75"}  # wait: for the last bucket's allreduce (or the slowest rank)
    rows = sorted({(e["pid"], e["tid"]) for e in events})
    t0 = min(e["ts"] for e in events)
    fig, ax = plt.subplots(figsize=(9, 0.6 + 0.5 * len(rows)))
    for e in events:
        kind = next((k for k in colours if k in e["name"]), "other")
        y = rows.index((e["pid"], e["tid"]))
        ax.broken_barh([((e["ts"] - t0) / 1e3, e["dur"] / 1e3)], (y - 0.4, 0.8), color=colours.get(kind, "k"))
    ax.set_yticks(range(len(rows)), [f"rank {p} {'comm' if t else 'main'}" for p, t in rows])
    ax.set(xlabel="ms since the first span", title="mpiexec -n 2 ... --overlap --timeline (5 steps)")
    ax.legend(
        handles=[plt.Rectangle((0, 0), 1, 1, color=c) for c in colours.values()],
        labels=list(colours),
        loc="upper left",
        bbox_to_anchor=(1, 1),
    )
    tutorial.show(fig, "09_timeline.png")
    busy = {k: sum(e["dur"] for e in events if k in e["name"]) / 1e3 for k in colours}
    print("milliseconds in all, both ranks: " + ", ".join(f"{k} {v:.1f}" for k, v in busy.items()))

# %% [markdown]
# ## 5. Mixed precision, emulated on a CPU
#
# `minidl.amp` rounds every op's inputs, outputs and gradients to fp16 or bf16 inside `autocast` (NumPy has no
# fast half-precision matmul: the numerics are emulated, no speed-up is claimed). fp16's smallest subnormal is
# 6e-8: a gradient of 1e-8 becomes 0. Scaling the loss by S = 2^16 before backward lifts the gradients into
# fp16's range; dividing by S before the update gives them back.


# %%
def tiny_gradient(scaler):
    """A loss whose gradient is 1e-8 per weight, computed in fp16."""
    w = nn.Parameter(np.ones(4, np.float32))
    with amp.autocast("fp16"):
        loss = (w * 1e-4).sum() * 1e-4
    (scaler.scale(loss) if scaler else loss).backward()
    if scaler:
        scaler.unscale_([w])
    return w.grad


print("fp16, no scaling:      ", tiny_gradient(None))
print("fp16, loss scale 2^16: ", tiny_gradient(amp.GradScaler()))

# %% [markdown]
# The LSTM language model trained the same number of steps in fp32, in fp16 with dynamic loss scaling (PyTorch
# GradScaler's rules) and in bf16 (float32's range, 8 bits of precision: no scaling needed).

# %%
flags = ["--quick", "--max-steps", "150", "--log-every", "1000"] if QUICK else ["--epochs", "2", "--log-every", "1000"]
ppl = {}
for precision in ("fp32", "fp16", "bf16"):
    extra = ["--loss-scale", "dynamic"] if precision == "fp16" else []
    ppl[precision] = lm.main(flags + ["--precision", precision] + extra)["test_ppl"]
for precision, value in ppl.items():
    print(f"{precision}: test perplexity {value:.2f} ({100 * (value / ppl['fp32'] - 1):+.2f}% against fp32)")
worst = max(abs(v / ppl["fp32"] - 1) for v in ppl.values())
print(f"largest gap to fp32: {100 * worst:.2f}% ({'within' if worst < 0.05 else 'NOT within'} 5%)")

# %% [markdown]
# ## 6. The article's experiment: ResNet-50 on up to 256 CPU nodes
#
# Hemsoth's article scaled ResNet-50 with Horovod to 256 two-socket Xeon nodes on Omni-Path, and found that speed
# was the easy part: past a global batch of about 800 to 2000 images, accuracy needed the linear scaling rule,
# warm-up and care with batch norm. Here both halves: the speed in virtual time, from one step of
# `minidl.models.resnet50()` measured on this machine (`python -m minidl.simulate cnn --model resnet50 --image 224
# --batch-size 8 --network omnipath100 --nodes 1,...,256` does the same), and the accuracy on the generated images.
#
# A node is described, not measured: 40 cores (2 x 20-core Xeon Gold 6148) at this machine's per-core speed, with
# half the ideal speed-up from its cores (`NodeSpec(cores=40, efficiency=0.5)`). Beside it, the rate the validation
# benchmark assumes for such a node, 100 images/s (`--profile params=25.6e6,rate=100,batch=8`), as an option.

# %%
from minidl.simulate import NodeSpec, described, scaling  # noqa: E402
from minidl.simulate.tasks import TaskOptions, profile_task  # noqa: E402

R50 = TaskOptions(model="resnet50", image=32 if QUICK else 224, batch_size=2 if QUICK else 8, steps=1 if QUICK else 3)
measured = profile_task("cnn", R50)
print(measured.describe())
zenith = NodeSpec(cores=40, efficiency=0.5)
assumed = described(25.6e6, 100, R50.batch_size, source="an assumed 100 images/s per node")
NODES = [1, 4, 16, 64, 256] if QUICK else [1, 2, 4, 8, 16, 32, 64, 128, 256]
curves = {
    "measured here, 40-core node": scaling(measured, NODES, "ring", "omnipath100", zenith),
    "assumed 100 images/s per node": scaling(assumed, NODES, "ring", "omnipath100"),
}
print(f"{'nodes':>5} {'global batch':>12}" + "".join(f" {name:>32}" for name in curves))
for i, n in enumerate(NODES):
    cells = "".join(f" {r[i].rate:>18,.0f} img/s {100 * r[i].efficiency:>5.0f}%" for r in curves.values())
    print(f"{n:>5} {n * R50.batch_size:>12}{cells}")
fig, ax = plt.subplots(figsize=(6, 3.5))
for name, rows in curves.items():
    ax.plot(NODES, [100 * r.efficiency for r in rows], "o-", label=name)
ax.set(xscale="log", xlabel="nodes (Omni-Path 100, ring allreduce)", ylabel="weak-scaling efficiency %")
ax.set(ylim=(0, 105), title=f"ResNet-50, batch {R50.batch_size} per node")
tutorial.quick_note(ax, f"quick: {R50.image}x{R50.image} images, batch {R50.batch_size}")
ax.legend()
tutorial.show(fig, "09_resnet50_scaling.png")

# %% [markdown]
# The 25 M-parameter gradient (100 MB) crosses a 100 Gb/s ring in a few tens of milliseconds, and a 40-core node
# takes far longer than that to compute a step: efficiency stays high to 256 nodes, as the article found. The batch
# per node stays fixed, so the global batch grows with the nodes and reaches the article's 800 to 2000 images at
# 100 to 256 nodes. Whether those steps still train the model is the other half. The ResNet-8 of sections 2 and 3
# stands in for ResNet-50 here (a ResNet-50 run to an accuracy takes hours on one core): plain SGD against the
# linear rule with warm-up at those global batches, and at 800 images batch norm per rank (2 images each, 400
# ranks) against SyncBatchNorm.

# %%
ARTICLE_BATCHES = [800] if QUICK else [800, 2000]
article = {
    (b, r): train(Setting(recipe=r, global_batch=b, micro=80, epochs=EPOCHS), data)["accuracy"]
    for b in ARTICLE_BATCHES
    for r in ("sgd", "linear")
}
for b in ARTICLE_BATCHES:
    steps = EPOCHS * (N_TRAIN // b)
    print(
        f"global batch {b} ({steps} steps): SGD {100 * article[b, 'sgd']:.2f}%, linear + warm-up "
        f"{100 * article[b, 'linear']:.2f}% per-label test accuracy"
    )
at800 = norm_study(data, ranks=400, per_rank=2, recipe="linear", epochs=EPOCHS)
for name, r in at800.items():
    print(f"global batch 800, {name:>13}: test per-label accuracy {100 * r['accuracy']:.2f}%")
