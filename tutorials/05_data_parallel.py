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

# run: mpiexec -n 2 python tutorials/05_data_parallel.py

# %% [markdown]
# # 05 - Data parallelism: P ranks, one model, averaged gradients
#
# The simplest way to train on many CPUs is **data parallelism**: every rank (MPI process) holds the whole
# model, takes its own share of each batch, and before every update the ranks *average their gradients*
# with an allreduce (tutorial 04). Every rank then applies the same update to the same parameters, so the
# replicas never drift apart. This is what Horovod does (Sergeev & Del Balso 2018) and what the articles
# minidl follows measured: an LSTM language model trained on PTB across up to 32 CPU nodes reached
# about 15x the single node's words/s
# ("Deep Learning: massively scaled parallel approach using hybrid supercomputers" (Medium, 2017)); Horovod reached 80% scaling efficiency on 16 GPUs
# (Illuminate, "Evaluating Parallel AI Training Using an HPC Facility" (EPCC Cirrus, c. 2020));
# a ResNet-50 was scaled to 256 CPU nodes, where batch normalization at large batch needed care
# (Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure" (The Next Platform, 2018)).
#
# In this lesson, under `mpiexec -n 2` (or more):
# 1. the averaged gradient of P ranks with batch b *is* the gradient of one batch of P*b - numerically;
# 2. the linear scaling rule and warmup (Goyal et al. 2017): what to do with the learning rate;
# 3. tensor fusion: one allreduce for many gradients;
# 4. words/s across allreduce algorithms, and where the time of a step goes;
# 5. batch norm across ranks: per-rank BatchNorm vs SyncBatchNorm.
#
# Run: `mpiexec -n 2 python tutorials/05_data_parallel.py` (`--quick` for a seconds-long run).
# Only rank 0 prints.

# %%
import time

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.tools import tutorial

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
comm = dist.init()  # MPI.COMM_WORLD
P, RANK = dist.size(), dist.rank()
# Under mpiexec the lesson goes on; in a notebook it runs itself under `mpiexec -n 2` and shows rank 0's output.
ON_RANKS = tutorial.need_ranks(2, "05_data_parallel.py", P)


def say(*args):
    if RANK == 0:
        print(*args, flush=True)


if ON_RANKS:
    say(f"{P} ranks")

# %% [markdown]
# ## 1. Averaged gradients = the gradient of a bigger batch
#
# Let each rank's loss be the mean over its own b examples, $L_r = \frac1b \sum_{i \in B_r} \ell_i$. The
# mean over ranks of their gradients is
#
# $$\frac1P \sum_r \nabla L_r = \frac1{Pb} \sum_r \sum_{i \in B_r} \nabla \ell_i = \nabla L_{\cup_r B_r}$$
#
# the gradient of the mean loss over the global batch of P*b examples. Same gradient, same update: P ranks
# with batch b take *exactly* the steps of one process with batch P*b. The only difference is rounding
# (the sum is added up in another order), so in float64 the two agree to ~1e-15.
#
# Below every rank builds the same small CNN (`broadcast_parameters` copies rank 0's weights to all),
# takes its slice of the global batch (`DistributedSampler`), and runs forward and backward; the
# `DistributedOptimizer` averages the gradients. Each rank also computes the one-process gradient on the
# whole global batch, for comparison.

# %%
minidl.set_default_dtype(np.float64)
minidl.manual_seed(0)
rng = np.random.default_rng(0)
N_IMAGES, b = 64, 4
images = rng.standard_normal((N_IMAGES, 1, 8, 8))
labels = rng.integers(0, 3, size=N_IMAGES)


def small_cnn(batchnorm=False):
    layers = [nn.Conv2d(1, 4, 3, padding=1)]
    layers += [nn.BatchNorm2d(4)] if batchnorm else []
    layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(4 * 4 * 4, 3)]
    return nn.Sequential(*layers)


model = small_cnn()
dist.broadcast_parameters(model)
opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), allreduce="ring")
sampler = dist.DistributedSampler(N_IMAGES, batch_size=b, seed=1)
mine = next(iter(sampler))  # this rank's b indices of global batch 0
global_batch = next(iter(dist.DistributedSampler(N_IMAGES, batch_size=P * b, seed=1, rank=0, size=1)))

opt.zero_grad()
F.cross_entropy(model(minidl.tensor(images[mine])), labels[mine]).backward()
local = {n: p.grad.copy() for n, p in model.named_parameters()}
opt.synchronize()  # the allreduce: now p.grad is the average over the ranks
averaged = {n: p.grad.copy() for n, p in model.named_parameters()}

reference = small_cnn()
reference.load_state_dict(model.state_dict())
F.cross_entropy(reference(minidl.tensor(images[global_batch])), labels[global_batch]).backward()
for name, p in reference.named_parameters():
    say(
        f"{name:>9}: |local - big batch| = {np.abs(local[name] - p.grad).max():.2e}   "
        f"|averaged - big batch| = {np.abs(averaged[name] - p.grad).max():.2e}"
    )
opt.step()

# %% [markdown]
# Each rank's own gradient is far from the big-batch one (it saw only b examples); the averaged one is equal
# to it up to rounding. The tests (`tests/test_distributed_equivalence.py`, `tests/mpi/test_dp_equivalence.py`)
# check the same after several steps, for the LSTM LM too and for every allreduce algorithm: parameters agree
# to 1e-8 relative, and the P replicas are bitwise identical.

# %% [markdown]
# **Exercise 7** (`python -m minidl.exercises start average_gradients`): average the gradients yourself, for
# shards of unequal size too (np.array_split of a batch that P does not divide, a rank with no sample). The
# checker runs P in-process ranks and compares with one process on the whole batch, bit for bit where every
# sum is exact: `python -m minidl.exercises check average_gradients`.

# %% [markdown]
# ## 2. The learning rate: linear scaling and warmup
#
# P ranks with batch b make one update per P*b examples, where one process with batch b would make P updates.
# Goyal et al. (2017, "Accurate, Large Minibatch SGD") argue: if the gradient changes little over those P
# small steps, P steps of lr η with batch b are close to one step of lr P*η with batch P*b. Hence the
# **linear scaling rule**: multiply the learning rate by P. Let us check the argument on our CNN: compare
# P plain steps (batch b, lr η) with one data-parallel step (P ranks of b, lr P*η) from the same start.

# %%
eta = 0.02
start = model.state_dict()
serial = small_cnn()
serial.load_state_dict(start)
serial_opt = optim.SGD(serial.parameters(), lr=eta)
for r in range(P):  # the same P*b examples, b at a time
    part = global_batch[r * b : (r + 1) * b]
    serial_opt.zero_grad()
    F.cross_entropy(serial(minidl.tensor(images[part])), labels[part]).backward()
    serial_opt.step()

big = small_cnn()
big.load_state_dict(start)
big_opt = dist.DistributedOptimizer(optim.SGD(big.parameters(), lr=P * eta))
big_opt.zero_grad()
F.cross_entropy(big(minidl.tensor(images[mine])), labels[mine]).backward()
big_opt.step()
moved = np.sqrt(sum(np.sum((serial.state_dict()[k] - start[k]) ** 2) for k in start))
apart = np.sqrt(sum(np.sum((serial.state_dict()[k] - big.state_dict()[k]) ** 2) for k in start))
say(
    f"{P} small steps moved the weights by {moved:.4f}; one step with lr x{P} lands {apart:.4f} away "
    f"({100 * apart / moved:.1f}% of the move)"
)

# %% [markdown]
# Close, but only while the gradient changes slowly - which it does not at the start of training, when the
# weights move fast. So Goyal et al. add a **warmup**: start at the single-process rate and raise it linearly
# to P*η over the first epochs (5 for ResNet-50 at 8k images per batch). minidl has it as a schedule:

# %%
from minidl.optim.lr_scheduler import LinearWarmup  # noqa: E402

warm_opt = dist.DistributedOptimizer(optim.SGD(small_cnn().parameters(), lr=P * eta))
warmup = LinearWarmup(warm_opt, warmup_steps=8, start_factor=1.0 / P)
rates = []
for _ in range(12):
    rates.append(warm_opt.param_groups[0]["lr"])
    warmup.step()
say("lr per step:", " ".join(f"{r:.3f}" for r in rates))

if RANK == 0:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3))
    ax.plot(rates, marker="o")
    ax.axhline(eta, ls="--", c="gray", label="single-process lr")
    ax.set_xlabel("step")
    ax.set_ylabel("learning rate")
    ax.set_title(f"linear scaling (x{P}) with warmup")
    ax.legend()
    tutorial.show(fig, "05_warmup.png")

# %% [markdown]
# ## 3. Tensor fusion
#
# An allreduce of n bytes over P ranks costs about $\alpha \cdot (\text{rounds}) + \beta \cdot n$ (tutorial 04):
# a latency α per message round, whatever the size, plus the bandwidth term. A model has many small gradient
# arrays (biases of a few hundred numbers); allreducing them one by one pays α for each. Horovod's **tensor
# fusion** packs them into one buffer (up to 64 MiB by default), allreduces it once, and unpacks. The
# `DistributedOptimizer` does the same; `opt.buckets` shows the plan (parameters in a fixed order, so every
# rank packs the same layout).

# %%
minidl.set_default_dtype(np.float32)
VOCAB, HIDDEN = (2000, 64) if QUICK else (10_000, 200)
T, B = 20, 20
from minidl.models.lm import LSTMLanguageModel  # noqa: E402

lm = LSTMLanguageModel(VOCAB, HIDDEN, 2, init_scale=0.1)
dist.broadcast_parameters(lm)
params = list(lm.parameters())
say(
    f"LM: {len(params)} gradient arrays, {sum(p.size for p in params) / 1e6:.2f}M parameters, "
    f"{sum(p.data.nbytes for p in params) / 2**20:.1f} MiB of gradients per step"
)
for fusion_bytes in (0, 2**20, dist.DEFAULT_FUSION_BYTES):
    o = dist.DistributedOptimizer(optim.SGD(params, lr=1.0), fusion_bytes=fusion_bytes)
    for p in params:
        p.grad = np.zeros_like(p.data)
    times = []
    for _ in range(3 if QUICK else 10):
        comm.Barrier()
        t0 = time.perf_counter()
        # what o.synchronize() does: pack each bucket, allreduce it, unpack (here with scale 1)
        dist.allreduce_buckets(o.buckets, comm, "ring", 1.0, check=False)
        times.append(time.perf_counter() - t0)
    say(f"fusion_bytes={fusion_bytes:>9}: {len(o.buckets):>2} allreduces per step, {1e3 * np.median(times):6.2f} ms")
    lm.zero_grad()

# %% [markdown]
# With P=2 on one machine the latency α is small (shared memory), so fusion saves less than on a real
# network, where α is microseconds to tens of microseconds per message.
#
# ## 4. Words per second, per algorithm
#
# Weak scaling, as "Deep Learning: massively scaled parallel approach using hybrid supercomputers" (Medium,
# 2017) measured it: each rank keeps its batch (b = 20 streams of T = 20 words) and P
# ranks train P times as many words per step. A perfect system would give P times the words/s; the
# efficiency is the fraction of that we get. Here, inside this one job, rank 0 first trains alone (the
# others wait), then all ranks train together with each allreduce algorithm and with MPI's own.
# `benchmarks/scaling.py` runs the same measurement as separate jobs for P = 1, 2, 4, ... 16.

# %%
steps, warm, repeats = (2, 1, 5) if QUICK else (6, 2, 5)
windows = np.random.default_rng(RANK).integers(0, VOCAB, size=(steps + warm, T + 1, B))


def words_per_second(optimizer, model):
    state, times = None, []
    for i, w in enumerate(windows):
        t0 = time.perf_counter()
        optimizer.zero_grad()
        logits, state = model(w[:-1], state)
        state = model.detach_state(state)
        F.cross_entropy(logits, w[1:].reshape(-1)).backward()
        if isinstance(optimizer, dist.DistributedOptimizer):
            optimizer.synchronize()
        optim.clip_grad_norm(model.parameters(), 5.0)
        optimizer.step()
        if i >= warm:
            times.append(time.perf_counter() - t0)
    return T * B / np.median(times)


def one_rank():  # rank 0 alone (the others wait), the baseline every efficiency divides by
    wps = words_per_second(optim.SGD(lm.parameters(), lr=1.0), lm) if RANK == 0 else None
    return dist.broadcast_state({"wps": wps})["wps"]


timings = {}


def all_ranks(algorithm):
    def measure():
        dist.broadcast_parameters(lm)
        o = dist.DistributedOptimizer(optim.SGD(lm.parameters(), lr=1.0), allreduce=algorithm)
        o.timings.reset()
        wps = P * words_per_second(o, lm)
        timings.setdefault(algorithm, []).append(o.timings.mean())
        return wps

    return measure


# Each configuration `repeats` times, interleaved (round r runs every configuration once), so that a change
# in the machine's load falls on all of them alike; the table gives the median and the min-max spread.
configs = {"1 rank, no allreduce": one_rank} | {f"{P} ranks, {a}": all_ranks(a) for a in dist.ALGORITHMS}
samples = tutorial.interleaved(configs, repeats) if ON_RANKS else {}
if samples:
    single = tutorial.spread(samples["1 rank, no allreduce"])[0]
    say(f"\n{'':<28}{'words/s (min-max)':>22}{'efficiency':>12}   compute / wait / comm (ms per step, median)")
    for name, values in samples.items():
        med, lo, hi = tutorial.spread(values)
        algorithm = name.split(", ")[1]
        split = ""
        if algorithm in timings:
            split = " / ".join(
                f"{1e3 * np.median([t[k] for t in timings[algorithm]]):.1f}"
                for k in ("compute", "wait", "communication")
            )
        say(
            f"{name:<28}{med:>9.0f} ({lo:.0f}-{hi:.0f}){100 * med / (P * single if algorithm in timings else single):>11.0f}%   {split}"
        )
    say(tutorial.busy_note(samples))

# %% [markdown]
# What the columns say (numbers vary from run to run on a shared machine; `benchmarks/scaling.py` keeps the
# best of several runs): **compute** is the forward and backward passes and the update; **wait** is time in a
# barrier for the slowest rank (load imbalance, a busy neighbour); **communication** is packing, the
# allreduce and unpacking (~18.6 MB of float32 gradients for Zaremba-small). On two cores the ring and
# Rabenseifner send each byte about once, the tree and naive algorithms twice; MPI's own Allreduce chooses
# by size as "auto" does. Measured with `benchmarks/scaling.py` on this 2-core machine; README has
# the table; on a bigger machine `--max-ranks 16` measures the scaling curve.
#
# ## 5. Batch norm across ranks
#
# BatchNorm normalizes each channel with the mean and variance *of the batch it sees*. In a data-parallel
# job plain `BatchNorm2d` sees each rank's b examples: its statistics are those of b, whatever P is. Goyal et
# al. keep it that way on purpose (b = 32 per worker, "the BN batch size"), so the model's function does not
# change as P grows. `SyncBatchNorm` instead allreduces the per-channel sums (count, sum x, sum x^2 forward;
# sum dy, sum dy*x̂ backward) and normalizes with the statistics of the global batch P*b: exactly what one
# process with batch P*b computes.

# %%
minidl.set_default_dtype(np.float64)
bn_model = small_cnn(batchnorm=True)
dist.broadcast_parameters(bn_model)
sync_model = dist.convert_sync_batchnorm(small_cnn(batchnorm=True))
sync_model.load_state_dict(bn_model.state_dict())
one_process = small_cnn(batchnorm=True)
one_process.load_state_dict(bn_model.state_dict())

x_mine, x_all = minidl.tensor(images[mine]), minidl.tensor(images[global_batch])
y_per_rank = bn_model(x_mine).data
y_sync = sync_model(x_mine).data
y_big = one_process(x_all).data[RANK * b : (RANK + 1) * b]  # this rank's rows of the big-batch output
say(
    f"|per-rank BN - big batch| = {np.abs(y_per_rank - y_big).max():.2e}    "
    f"|SyncBatchNorm - big batch| = {np.abs(y_sync - y_big).max():.2e}"
)

# %% [markdown]
# How noisy are per-rank statistics? The batch mean of b samples has standard deviation σ/√b, so with b = 2
# per rank BN normalizes with a very noisy mean, while SyncBatchNorm over P*b is √P times steadier. At the
# other end, the Dell team scaling ResNet-50 on CPUs (Hemsoth, "Scaling with Accuracy on CPU-Only HPC Infrastructure" (The Next Platform, 2018)) met trouble with batches of 800 to 2000 images
# normalized as one; choosing b per rank (per-rank BN) or P*b (SyncBatchNorm) is choosing that batch size.

# %%
features = np.random.default_rng(1).standard_normal(4096)
for bs in (2, 8, 32, 128):
    means = features[: (4096 // bs) * bs].reshape(-1, bs).mean(axis=1)
    say(f"BN batch {bs:>4}: std of the batch mean {means.std():.3f} (1/sqrt(b) = {1 / np.sqrt(bs):.3f})")

# %% [markdown]
# **Exercise 8** (`python -m minidl.exercises start zero1`): ZeRO stage 1 (Rajbhandari et al., "ZeRO: Memory
# Optimizations Toward Training Trillion Parameter Models", 2020) splits the allreduce into its two halves and
# updates only this rank's shard in between, so each rank keeps 1/P of the optimizer state
# (`dist.ZeroOptimizer` is minidl's). Write it for SGD with momentum:
# `python -m minidl.exercises check zero1`.

# %% [markdown]
# ## Summary
#
# - `dist.init()`, `dist.broadcast_parameters(model)`, `dist.DistributedOptimizer(opt, allreduce=...)`,
#   `dist.DistributedSampler(n, b)`: P ranks with batch b compute exactly what one process with batch P*b does.
# - Scale the learning rate with P and warm up (Goyal et al.).
# - Fusion turns many small allreduces into a few large ones; `opt.timings` tells compute from communication.
# - Per-rank BatchNorm or `dist.convert_sync_batchnorm(model)`: choose the batch size BN normalizes over.
# - `dist.save_checkpoint` / `dist.load_checkpoint` resume bitwise; `dist.run(main)` turns an error on any
#   rank into a clean abort of the whole job instead of a hang.
