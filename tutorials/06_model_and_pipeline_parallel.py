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
# # 06 - Model parallelism and layer pipelining: splitting the model instead of the data
#
# Data parallelism (tutorial 05) copies the whole model to every rank. Justus, "High performance computing for AI"
# (Digital Catapult, 2018), names two other ways to
# spread a network over workers: **model parallelism**, where different parts of the model live on different
# workers, and **layer pipelining**, where the workers run different layers at the same time. Both can train
# models larger than one worker's memory, because each worker stores only its share of the weights.
#
# In this lesson:
# 1. layer-wise model parallelism: a `Sequential` cut into stages, with differentiable send/recv;
# 2. tensor (intra-layer) parallelism: Megatron's column- and row-parallel Linear layers in an MLP block;
# 3. pipelining with micro-batches: GPipe and 1F1B, exact against one process;
# 4. the schedule as it actually ran, drawn from recorded timestamps;
# 5. the bubble: measured idle time against the formula (p-1)/(m+p-1), for several m;
# 6. activation memory: GPipe holds m micro-batches per stage, 1F1B at most p;
# 7. data x pipeline parallelism: a 2 x 2 grid of ranks from `comm.Split`.
#
# Everything runs in this one process on **simulated ranks** (`collectives.simulate(P, fn)` runs `fn(comm)`
# on P threads, each with a communicator speaking mpi4py's buffer calls), so P = 4 stages need no cluster.
# The very same functions take an `mpi4py` communicator under `mpiexec` (last section).
#
# Run: `python tutorials/06_model_and_pipeline_parallel.py` (`--quick`: a few seconds).

# %%
import time

import numpy as np

import collectives
import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.distributed.model_parallel.layerwise import SequentialStage, gather_state_dict
from minidl.distributed.model_parallel.tensor_parallel import ParallelMLP
from minidl.distributed.pipeline.engine import Pipeline, make_grid, split_sequential
from minidl.distributed.pipeline.schedule import (
    bubble_formula,
    bubble_fraction,
    ideal_events,
    plot_schedule,
    stage_idle_fractions,
)
from minidl.tensor import Function
from minidl.tools import tutorial

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
OUT = tutorial.out_dir()


def on_ranks(P, fn, *args):
    """fn(comm, *args) on P simulated ranks, in float64 (the default dtype is per thread)."""

    def body(comm, *a):
        minidl.set_default_dtype(np.float64)
        return fn(comm, *a)

    return collectives.simulate(P, body, *args, timeout=300)


def rel_diff(a, b):
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-300))


minidl.set_default_dtype(np.float64)
rng = np.random.default_rng(0)
IN, HIDDEN, CLASSES, N = 8, 16, 4, 32
X, Y = rng.standard_normal((N, IN)), rng.integers(0, CLASSES, N)


def make_model(depth=6, width=HIDDEN, seed=0):
    """depth-1 blocks (Linear + Tanh) and an output Linear; the same seed gives the same weights on every rank."""
    minidl.manual_seed(seed)
    blocks = [nn.Sequential(nn.Linear(IN if k == 0 else width, width), nn.Tanh()) for k in range(depth - 1)]
    return nn.Sequential(*blocks, nn.Linear(width, CLASSES))


def dense_grads():
    model = make_model()
    F.cross_entropy(model(X), Y).backward()
    return {k: p.grad for k, p in model.named_parameters()}


WANT = dense_grads()

# %% [markdown]
# ## 1. Layer-wise model parallelism
#
# Rank r holds a contiguous block of layers (`SequentialStage`). Forward: rank 0 computes its layers and
# *sends* the activation to rank 1, and so on; the last rank computes the loss. Backward runs the chain rule
# across ranks: `p2p.send` and `p2p.recv` are autograd ops, so `recv`'s backward sends dL/d(activation) back
# and `send`'s backward receives it. Each rank calls `.backward()` on what it holds (the loss, or a send
# "token"), and the gradients are exactly the single-process ones.


# %%
def model_parallel_grads(comm):
    stage = SequentialStage(make_model(), comm)
    out = stage(X if stage.is_first else None)
    (F.cross_entropy(out, Y) if stage.is_last else out).backward()
    return {k: p.grad for k, p in stage.named_parameters()}, list(stage.layer_range)


results = on_ranks(3, model_parallel_grads)
worst = 0.0
for r, (grads, layers) in enumerate(results):
    print(f"rank {r}: layers {layers}, {len(grads)} parameter tensors")
    worst = max([worst] + [rel_diff(g, WANT[k]) for k, g in grads.items()])
print(f"model parallel (3 ranks) vs one process: max relative gradient difference {worst:.1e}")

# %% [markdown]
# Only one rank works at a time: while rank 2 computes, ranks 0 and 1 wait. Model parallelism buys memory,
# not speed. Pipelining (section 3) fixes that.
#
# ## 2. Tensor parallelism (Megatron-LM)
#
# Instead of cutting *between* layers, cut *inside* them. In an MLP block Y = W2 act(W1 X), split W1 by rows
# (output features: column-parallel) and W2 by columns (input features: row-parallel). Rank r computes
# act(W1_r X) - its own slice of the hidden features - and W2_r times that slice; the partial products are
# summed by one allreduce. Backward needs one allreduce too, of dL/dX (Megatron's conjugate operators f and g).


# %%
def tensor_parallel_check(comm):
    minidl.manual_seed(1)
    fc1, fc2 = nn.Linear(IN, 32), nn.Linear(32, CLASSES)
    block = ParallelMLP.from_dense(fc1, nn.ReLU(), fc2, comm=comm)
    x = minidl.tensor(X, requires_grad=True)
    out = block(x)
    F.cross_entropy(out, Y).backward()
    return out.data, x.grad, block.fc1.weight.data.shape


minidl.manual_seed(1)
fc1, fc2 = nn.Linear(IN, 32), nn.Linear(32, CLASSES)
x_dense = minidl.tensor(X, requires_grad=True)
dense_out = fc2(fc1(x_dense).relu())
F.cross_entropy(dense_out, Y).backward()
for r, (out, gx, shard) in enumerate(on_ranks(2, tensor_parallel_check)):
    print(
        f"rank {r}: fc1 shard {shard}; output vs dense {rel_diff(out, dense_out.data):.1e}, "
        f"dL/dx vs dense {rel_diff(gx, x_dense.grad):.1e}"
    )

# %% [markdown]
# ## 3. Pipelining: micro-batches keep every stage busy
#
# Cut the mini-batch of N examples into m **micro-batches**. As soon as stage 0 has finished micro-batch 0 it
# starts micro-batch 1 while stage 1 works on micro-batch 0, and so on. Each stage adds up its parameter
# gradients over the m micro-batches and the optimizer steps once per mini-batch. With micro-batch i's mean
# loss weighted by n_i / N the weighted losses sum to the mini-batch mean, so the step is *exactly* the
# single-process one. Two schedules order each stage's forwards (F) and backwards (B):
#
# * **GPipe** (Huang et al. 2019): all m forwards, then all m backwards.
# * **1F1B / PipeDream-Flush** (Narayanan et al. 2021): stage s runs p-s-1 warm-up forwards, then
#   alternates one forward and one backward, then the remaining backwards.
#
# Both flush the pipeline before the update, so both are synchronous and exact. Below, 4 stages and 8
# micro-batches train 2 steps of SGD with momentum; the parameters are compared with one process's.

# %%
P, M = 4, 8


def single_process(batches, make=make_model):
    model = make()
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for x, y in batches:
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    return model.state_dict()


def pipelined(comm, batches, schedule, m, make=make_model, dp_comm=None):
    """Train this rank's stage; return the dense state dict on stage 0 and the Pipeline (records)."""
    model = make()
    stage = split_sequential(model, comm.Get_size(), comm.Get_rank())
    pipe = Pipeline(stage, F.cross_entropy, schedule, m, comm)
    opt = optim.SGD(stage.parameters(), lr=0.1, momentum=0.9)
    if dp_comm is not None:  # section 7: average over the replicas of this stage
        opt = dist.DistributedOptimizer(opt, comm=dp_comm)
    for x, y in batches:
        opt.zero_grad()
        pipe.train_step(x, y)
        opt.step()
    return gather_state_dict(stage, 0, comm), pipe  # split_sequential keeps the dense names


batches = [(X, Y), (X[::-1].copy(), Y[::-1].copy())]
want = single_process(batches)
for schedule in ("gpipe", "1f1b"):
    got = on_ranks(P, pipelined, batches, schedule, M)[0][0]
    worst = max(rel_diff(got[k], want[k]) for k in want)
    print(f"{schedule:5s}: p={P}, m={M}, 2 steps: max relative parameter difference vs one process {worst:.1e}")

# %% [markdown]
# ## 4. The schedule as it ran
#
# Every op is timed on its stage (start and end, in seconds after a barrier that starts the step on all
# stages together); `Pipeline.gather_events()` collects them on stage 0 and `plot_schedule` draws them:
# stages down the y axis, time along x, forwards blue, backwards orange, each box labelled with its
# micro-batch.
#
# Our simulated ranks are threads of one Python process on a 2-core machine, so real NumPy compute on 4
# stages competes for the cores (and the interpreter lock); in a cluster every stage has its own node or
# accelerator. To see the schedule itself we give each stage an emulated **device**: an autograd op that
# holds the stage for a fixed time (`time.sleep`, which uses no CPU: forward T_F, backward T_B = 2 T_F, as
# backward is roughly twice the work) in addition to the layers' real compute.

# %%
T_F = 0.002 if QUICK else 0.004


class Device(Function):
    """Identity whose forward takes t_f seconds and backward t_b: a stage's compute on its own device."""

    def forward(self, x, *, t_f, t_b):
        self.t_b = t_b
        time.sleep(t_f)
        return x.copy()

    def backward(self, g):
        time.sleep(self.t_b)
        return g


class OnDevice(nn.Module):
    def __init__(self, layers, t_f=T_F, t_b=2 * T_F):
        super().__init__()
        self.layers, self.t_f, self.t_b = layers, t_f, t_b

    def forward(self, x):
        return Device.apply(self.layers(x), t_f=self.t_f, t_b=self.t_b)


def timed_run(comm, schedule, m, device=True, steps=2, width=HIDDEN, n=N):
    """Train a few steps; return (events of the last step, peak stashed micro-batches) on each stage."""
    model = make_model(width=width)
    stage = split_sequential(model, comm.Get_size(), comm.Get_rank())
    pipe = Pipeline(OnDevice(stage) if device else stage, F.cross_entropy, schedule, m, comm)
    x = np.resize(X, (n, IN)) if n != N else X
    y = np.resize(Y, n)
    for _ in range(steps):  # the first step warms up; the last one is drawn
        pipe.train_step(x, y)
    return pipe.gather_events(), pipe.peak_stashed


runs = {s: on_ranks(P, timed_run, s, M) for s in ("gpipe", "1f1b")}
import matplotlib.pyplot as plt  # noqa: E402

fig, axes = plt.subplots(3, 1, figsize=(11, 8))
for ax, s in zip(axes, ("gpipe", "1f1b")):
    plot_schedule(runs[s][0][0], ax=ax, title=f"{s.upper()} as it ran: p={P}, m={M}, emulated device, ")
plot_schedule(
    ideal_events("1f1b", M, P, T_F, 2 * T_F), ax=axes[2], title="1F1B ideal (no overhead, no comm), ", measured=False
)
axes[2].set_xlabel("time (ms)")
fig.tight_layout()
tutorial.show(fig, "06_pipeline_schedules.png", dpi=110)

# %% [markdown]
# GPipe's picture is a forward parallelogram followed by a backward one; 1F1B interleaves them after the
# warm-up. Both take about (m + p - 1)(T_F + T_B): the empty triangles at the start and the end are the
# **bubble**.
#
# And the same pipeline with *only* the real compute (wider layers, a bigger batch), threads sharing the
# machine's cores: the ops stretch when several stages compete for a core, and the stages are unbalanced
# (stage 0 holds two hidden blocks, the last stage only the small output layer and the loss), so the bubble
# is far above the formula. Balancing the stages' work is half of pipeline engineering (GPipe's `balance`,
# `split_sequential(..., balance=[...])` here). The measurements below use the emulated device.

# %%
real = on_ranks(P, timed_run, "1f1b", M, False, 2, 64 if QUICK else 256, 256 if QUICK else 1024)[0][0]
plot_schedule(
    real, OUT / "06_pipeline_real_compute.png", title=f"1F1B, real NumPy compute on simulated ranks, p={P}, m={M}, "
)
print(
    f"real compute: measured bubble {bubble_fraction(real, P):.2f} (formula {bubble_formula(M, P):.2f}); "
    f"saved {OUT / '06_pipeline_real_compute.png'}"
)

# %% [markdown]
# ## 5. The bubble: measured against (p - 1) / (m + p - 1)
#
# With forward and backward taking t_f and t_b on every stage and free communication, a flushed pipeline
# takes (m + p - 1)(t_f + t_b) while each stage computes for m (t_f + t_b), so each stage is idle a fraction
#
# $$\text{bubble} = \frac{p-1}{m+p-1}$$
#
# of the time (GPipe's analysis; 1F1B has the same bubble). **Our measurement**: take the rectangle of p
# stages by the step's span (first op's start to last op's end, over all stages); the bubble is the share of
# it not covered by ops, 1 - (sum of op durations) / (p x span). The idle time of each stage is measured
# against the same span, so the bubble is their mean. More micro-batches shrink the bubble, at the price of
# smaller (less efficient) micro-batches and more messages.

# %%
MS = (1, 4, 8) if QUICK else (1, 2, 4, 8, 16)
rows = []
for m in MS:
    for s in ("gpipe", "1f1b"):
        events = on_ranks(P, timed_run, s, m)[0][0]
        idle = stage_idle_fractions(events)
        rows.append((m, s, bubble_formula(m, P), bubble_fraction(events, P), [idle[k] for k in sorted(idle)]))
print(f"p = {P} stages, emulated device t_f = {T_F * 1e3:.0f} ms, t_b = {2 * T_F * 1e3:.0f} ms per micro-batch")
print(f"{'m':>3} {'schedule':>8} {'formula':>8} {'measured':>9}   idle per stage")
for m, s, formula, measured, idle in rows:
    print(f"{m:>3} {s:>8} {formula:>8.3f} {measured:>9.3f}   " + " ".join(f"{v:.2f}" for v in idle))

fig, ax = plt.subplots(figsize=(6, 3.5))
grid_m = np.arange(1, max(MS) + 1)
ax.plot(grid_m, [bubble_formula(m, P) for m in grid_m], "k-", label="(p-1)/(m+p-1)")
for s, marker in (("gpipe", "o"), ("1f1b", "s")):
    ax.plot([r[0] for r in rows if r[1] == s], [r[3] for r in rows if r[1] == s], marker, label=f"{s} measured")
ax.set_xlabel("micro-batches m")
ax.set_ylabel("bubble fraction")
ax.set_title(f"p = {P} stages")
ax.legend()
fig.tight_layout()
tutorial.show(fig, "06_bubble_vs_m.png", dpi=110)

# %% [markdown]
# The measured bubble sits a little above the formula: the formula assumes free communication and identical
# op times, while here each message costs a thread hand-over and the real layers add a little compute of
# their own. The trend in m is the formula's.
#
# ## 6. Activation memory: GPipe holds m, 1F1B at most p
#
# A forward must keep its activations until its backward has run. `Pipeline.peak_stashed` records the
# largest number of micro-batches whose activations a stage held at once during the step.

# %%
print(f"peak micro-batches held per stage (p={P}, m={M}):")
for s in ("gpipe", "1f1b"):
    print(f"  {s:5s}: {[peak for _, peak in runs[s]]}")

# %% [markdown]
# GPipe's every stage holds all m micro-batches (the backwards only start after the last forward); 1F1B's
# stage s holds at most p - s, however large m is - the same bubble for a fraction of the memory. This is why
# 1F1B lets m grow (smaller bubble) without the activation memory growing with it.

# %% [markdown]
# **Exercise 6** (`python -m minidl.exercises start one_f_one_b`): write the 1F1B order of one stage. The
# checker holds it to the rules (every op once, in order, the warm-up, one forward then one backward, at most
# min(p - s, m) in flight), runs it on an ideal pipeline and compares its bubble with (p - 1) / (m + p - 1):
# `python -m minidl.exercises check one_f_one_b`.

# %% [markdown]
# ## 7. Data x pipeline parallelism
#
# With dp x pp ranks, `make_grid(comm, pp)` arranges them as dp pipelines of pp stages (world rank =
# replica * pp + stage) using `comm.Split` twice: one communicator per pipeline (its ranks are the stages)
# and one per stage across the pipelines (the replicas of that stage). Each pipeline trains on its shard of
# the global batch, and the `DistributedOptimizer` averages each stage's gradients over its data-parallel
# group before the step - the same step as one process on the whole global batch.


# %%
def dp_pp(comm, batches, schedule):
    grid = make_grid(comm, 2)
    half = N // grid.dp
    shard = [
        (x[grid.replica * half : (grid.replica + 1) * half], y[grid.replica * half : (grid.replica + 1) * half])
        for x, y in batches
    ]
    state, _ = pipelined(grid.pp_comm, shard, schedule, 4, dp_comm=grid.dp_comm)
    return comm.Get_rank(), grid.replica, grid.stage, state


for schedule in ("gpipe", "1f1b"):
    out = on_ranks(4, dp_pp, batches, schedule)
    if schedule == "gpipe":
        for rank, replica, stage, _ in out:
            print(f"world rank {rank}: pipeline (replica) {replica}, stage {stage}")
    worst = max(rel_diff(state[k], want[k]) for _, _, stage, state in out if state for k in want)
    print(f"2 x 2 dp x pp, {schedule}: max relative parameter difference vs one process {worst:.1e}")

# %% [markdown]
# ## Under MPI
#
# Nothing above depends on the simulated communicator. Under `mpiexec -n 4 python train.py`, rank r of
# `MPI.COMM_WORLD` holds stage r:
#
# ```python
# comm = dist.init()
# stage = split_sequential(make_model(), comm.Get_size(), comm.Get_rank())
# pipe = Pipeline(stage, F.cross_entropy, "1f1b", micro_batches=8, comm=comm)
# opt = optim.SGD(stage.parameters(), lr=0.1)
# for x, y in batches:
#     opt.zero_grad(); pipe.train_step(x, y); opt.step()
# ```
#
# `tests/mpi/test_pipeline_mpi.py` checks exactly this against one process at 2 to 5 ranks (and a 2 x 2
# grid at 4). The LSTM language model trains this way with
# `mpiexec -n 3 python -m minidl.train lm --parallel pipeline --quick --schedule 1f1b --micro-batches 4` (plus
# `--pipeline-stages PP` for dp x pp): the model's `units()` cut into stages; it prints the last training step's
# measured bubble against the formula and the micro-batches each stage held.
#
# Further reading: Huang et al. (2019), GPipe; Narayanan et al. (2021), Efficient large-scale language model
# training on GPU clusters (PipeDream-Flush / 1F1B); Shoeybi et al. (2019), Megatron-LM; Ben-Nun & Hoefler
# (2018), Demystifying parallel and distributed deep learning (cited by Justus 2018).
