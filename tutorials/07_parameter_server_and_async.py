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

# run: mpiexec -n 3 python tutorials/07_parameter_server_and_async.py

# %% [markdown]
# # 07 - Parameter servers, asynchronous SGD and local SGD: the other ways to do data parallelism
#
# Tutorial 05 trained data-parallel with an **allreduce**: every rank averages gradients with every other,
# then all take the same step. Singh, "Scaling in the Deep Learning Applications" (2017) lists the
# choices behind that design, each with an alternative:
#
# - **synchronous vs asynchronous**: tutorial 05 has everyone wait for everyone at every step; in
#   **asynchronous** (Downpour) SGD workers never wait;
# - **decentralized vs centralized**: tutorial 05's ranks talk to each other (allreduce); a **parameter
#   server** holds the model instead, and workers push gradients to it and pull parameters from it;
# - **gradient vs parameter averaging**: tutorial 05 averages gradients every step; **local SGD** trains
#   alone for k steps, then averages the *parameters*.
#
# The seed also names what decides between them: the network bandwidth workers need to keep reading and
# writing shared parameters (bandwidth being scarce, and shared with other jobs), the cost of barriers when
# machines are slow, and **fault tolerance** at scale. We build each scheme (`minidl.distributed.parameter_server`,
# `local_sgd`), check the synchronous ones are exact, count their bytes on the wire, watch the staleness of
# asynchronous updates, and race all four on one task (`benchmarks/compare.py`).
#
# Run: `mpiexec -n 3 python tutorials/07_parameter_server_and_async.py` (`--quick`: seconds). Rank 0 is the
# server in the parameter-server sections, so at least 2 ranks are needed; 3 or more show asynchrony.

# %%
import os
import sys

import numpy as np

import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import nn, optim
from minidl.tools import tutorial

# the experiment harness that races the schemes lives with the benchmarks (benchmarks/compare.py)
sys.path.insert(0, str(tutorial.TUTORIALS.parent / "benchmarks"))
import compare as C  # noqa: E402

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
comm = dist.init()  # MPI.COMM_WORLD
P, RANK = dist.size(), dist.rank()
OUT = str(tutorial.out_dir())
# Under mpiexec the lesson goes on; in a notebook it runs itself under `mpiexec -n 3` and shows rank 0's output.
ON_RANKS = tutorial.need_ranks(3, "07_parameter_server_and_async.py", P)


def say(*args):
    if RANK == 0:
        print(*args, flush=True)


if ON_RANKS:
    say(f"{P} ranks: in the parameter-server runs rank 0 is the server and ranks 1..{P - 1} are workers")

# %% [markdown]
# ## 1. A synchronous parameter server is the same algorithm as allreduce averaging
#
# Rank 0 keeps the parameters and the optimizer. Each step, each of the W = P - 1 workers computes the
# gradient of its own batch and **pushes** it; the server waits for all W, applies their average
# `(1/W) sum_w g_w` (the gradient of the combined batch, as in tutorial 05), and every worker **pulls** the new
# parameters back. The messages are plain buffers: a 4-integer header (`[kind, version, step, numel]`) and
# the values, received by the server from `ANY_SOURCE` (the `Status` says who sent it). Compare with one
# process on the combined batch, in float64:

# %%
minidl.set_default_dtype(np.float64)
rng = np.random.default_rng(0)
X = rng.standard_normal((512, 8))
Y = np.argmax(X @ rng.standard_normal((8, 4)), axis=1)  # labels from a random linear teacher
W, B = P - 1, 8


def make_model():
    minidl.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


def sgd(params):
    return optim.SGD(params, lr=0.2, momentum=0.9)


def batch(step, worker, workers, b=B):
    start = ((step * workers + worker) * b) % (len(X) - workers * b)
    return slice(start, start + b)


def loss_on(model, rows):
    return F.cross_entropy(model(minidl.tensor(X[rows])), Y[rows])


model = make_model()
if dist.is_server(comm):
    stats = dist.ParameterServer(model, sgd, comm).serve()  # returns once every worker said DONE
else:
    worker = dist.PSWorker(model, comm)  # pulls the server's parameters first
    for t in range(5):
        worker.zero_grad()
        loss_on(model, batch(t, RANK - 1, W)).backward()
        worker.step()  # push, wait for the averaged update, pull
    worker.close()
dist.collect_parameters(model, comm)  # the server's final parameters, on every rank

reference = make_model()  # one process, batch W * B
opt = sgd(list(reference.parameters()))
for t in range(5):
    opt.zero_grad()
    first = batch(t, 0, W).start
    loss_on(reference, slice(first, first + W * B)).backward()
    opt.step()
err = max(
    np.abs(p.data - q.data).max() / np.abs(q.data).max() for p, q in zip(model.parameters(), reference.parameters())
)
say(f"sync PS ({W} workers x batch {B}) vs one process (batch {W * B}): max relative difference {err:.1e}")
assert err < 1e-8

# %% [markdown]
# ## 2. What it costs: every byte goes through the server
#
# Per step a worker sends one gradient and receives one copy of the parameters: 2 x model bytes, like
# an allreduce rank (a ring allreduce sends and receives 2(P-1)/P x model each way: about 4 x model in and
# out together). But the *server* receives W gradients and sends W copies: **2W x model per step**, growing
# with the number of workers, while an allreduce rank's traffic stays flat. This is the bottleneck Singh (2017)
# points at: workers reading and writing shared parameters all the time need a great deal of bandwidth. Sharding the
# parameters over S servers (`num_servers=S`, whole tensors balanced by size) divides it by S, at the price
# of S ranks that compute no gradients. Predicted, for a 1 MB model:

# %%
MB = 2**20
say(f"{'ranks P':>8s} {'allreduce, per rank':>20s} {'PS (1 server), server':>22s} {'PS (4 servers), server':>23s}")
for p in (8, 16, 64, 256):
    say(
        f"{p:8d} {C.allreduce_bytes_per_rank(MB, p) / MB:17.2f} MB {C.server_bytes_per_step(MB, p - 1) / MB:19.1f} MB "
        f"{C.server_bytes_per_step(MB, p - 4, 4) / MB:20.1f} MB"
    )

# %% [markdown]
# The bytes are counted, not just predicted: `dist.CountingComm(comm)` wraps a communicator and adds up
# what each rank sends to each other rank; one exchange gives the whole traffic matrix.

# %%
counted = dist.CountingComm(comm)
model = make_model()
steps = 4
if dist.is_server(counted):
    dist.ParameterServer(model, sgd, counted).serve()
else:
    worker = dist.PSWorker(model, counted)
    for t in range(steps):
        worker.zero_grad()
        loss_on(model, batch(t, RANK - 1, W)).backward()
        worker.step()
    worker.close()
M = counted.traffic_matrix()  # M[i, j] = bytes rank i sent to rank j
nbytes = sum(p.data.nbytes for p in model.parameters())
total = M.sum(axis=0) + M.sum(axis=1)
say(
    f"model {nbytes} bytes; bytes sent + received over {steps} steps (+ first pull, DONE): "
    + ", ".join(f"rank {r}{' (server)' if r == 0 else ''}: {b:,}" for r, b in enumerate(total))
)
say(f"server / worker = {total[0] / total[1]:.2f} (W = {W})")

# %% [markdown]
# ## 3. Asynchronous SGD (Downpour) and staleness
#
# Downpour SGD (Dean et al. 2012) drops the barrier: the server applies each gradient **the moment it
# arrives**, `w <- w - lr g_w`, and a worker pulls fresh parameters only every `fetch_every` steps. Nobody
# waits for the slowest worker, but a gradient may have been computed on parameters that are already
# several updates old. Its **staleness** is the server's version when it is applied minus the version the
# worker computed on; the server records it for every update. All workers start from version 0 together,
# so with two or more workers some first gradients are already stale; pulling less often makes it worse
# (a worker's own previous pushes count too).

# %%
minidl.set_default_dtype(np.float32)


def plain_sgd(params):
    return optim.SGD(params, lr=0.1)  # no momentum: stale momentum overshoots


def async_run(steps, fetch_every=1, bound=None):
    """Train asynchronously; returns (server stats on rank 0, held-out loss of the final model)."""
    model, stats = make_model(), None
    if dist.is_server(comm):
        stats = dist.ParameterServer(model, plain_sgd, comm, asynchronous=True, staleness_bound=bound).serve()
    else:
        worker = dist.PSWorker(model, comm, asynchronous=True, fetch_every=fetch_every, staleness_bound=bound)
        for t in range(steps):
            rows = batch(t, RANK - 1, W, 16)
            worker.zero_grad()
            loss_on(model, rows).backward()
            worker.step(lambda rows=rows: loss_on(model, rows).backward())  # recompute if refused as too stale
        worker.close()
    dist.collect_parameters(model, comm)
    with minidl.no_grad():
        return stats, float(loss_on(model, slice(0, len(X))).item())


steps = 30 if QUICK else 150
runs = {
    "pull every step": async_run(steps),
    "pull every 4 steps": async_run(steps, 4),
    "pull every 4, bound 2": async_run(steps, 4, bound=2),
}
for name, (stats, loss) in runs.items():
    say(f"{name:22s} loss {loss:.3f} | {stats.summary() if stats else ''}")

if RANK == 0:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3))
    for k, (name, (stats, _)) in enumerate(runs.items()):
        h = stats.staleness_histogram()
        ax.bar(np.arange(len(h)) + 0.27 * (k - 1), h, width=0.27, label=name)
    ax.set(xlabel="staleness (updates missed)", ylabel="gradients applied", title=f"asynchronous PS, {W} workers")
    ax.legend()
    tutorial.show(fig, "07_staleness.png")

# %% [markdown]
# A staleness bound (as in stale-synchronous parallel, Ho et al. 2013) caps the damage: the server refuses
# a gradient more than s updates old and sends the worker the current parameters instead, and the worker
# recomputes on them (`step(closure)`; without a closure it drops the batch). Refused gradients are wasted
# work: the bound trades computation for freshness.
#
# ## 4. Parameter averaging: local SGD
#
# The decentralized counterpart of skipping communication: each rank trains **its own replica** for k
# steps, then one allreduce replaces every replica by the mean of all of them. With k = 1 and plain SGD this
# is exactly gradient averaging, since `(1/P) sum_r (w - lr g_r) = w - lr (1/P) sum_r g_r`; with k > 1 the
# replicas drift apart between averages, and communication falls k-fold.

# %%
minidl.set_default_dtype(np.float64)


def local_sgd_run(k, steps=8, averaging="parameters"):
    model = make_model()
    base = optim.SGD(model.parameters(), lr=0.2)
    opt = dist.LocalSGD(base, average_every=k) if averaging == "parameters" else dist.DistributedOptimizer(base)
    for t in range(steps):
        opt.zero_grad()
        loss_on(model, batch(t, RANK, P)).backward()
        opt.step()
    return np.concatenate([p.data.ravel() for p in model.parameters()])


gap = np.abs(local_sgd_run(1) - local_sgd_run(1, averaging="gradients")).max()
say(f"local SGD with k = 1 vs gradient averaging after 8 steps: max difference {gap:.1e}")
assert gap < 1e-12

# %% [markdown]
# ## 5. The race: same model, same data, four schemes
#
# `compare.compare` trains one MLP on the generated shape images (`minidl.data.make_shapes`, 5 labels,
# binary cross-entropy) from the same weights, with the same batch per worker and the same number of steps
# per worker, under each scheme on these P ranks, and reports throughput, bytes per step counted on the wire
# (the busiest rank and a worker) and loss against steps and against wall time. The parameter-server runs
# have one fewer worker (rank 0 serves).

# %%
minidl.set_default_dtype(np.float32)
task = C.image_task(n_train=1000 if QUICK else 4000, n_test=300, hidden=32 if QUICK else 256)
results = C.compare(comm, task, steps=20 if QUICK else 300)
if RANK == 0:
    print(task.name)
    print(C.format_table(results))
    quick = "\nquick mode: 20 steps per worker, too few for the schemes' losses to part (run without --quick)"
    C.plot(results, os.path.join(OUT, "07_schemes.png"), title=f"{task.name}, {P} ranks" + (quick if QUICK else ""))
    tutorial.show_file(tutorial.out_dir() / "07_schemes.png")  # inline in a notebook

# %% [markdown]
# What to read in the table (numbers vary with the machine; ranks on one laptop share cores and talk
# through shared memory, so communication is far cheaper than on a cluster network):
#
# - **bytes per step** are exact. The server moves W times what a worker moves; allreduce ranks all move
#   about 4(P-1)/P x model; local SGD moves that divided by k.
# - **loss against steps**: with as many workers, allreduce and the synchronous PS take identical steps
#   (section 1); here the PS has one worker fewer, so a smaller global batch. Local SGD follows allreduce
#   closely; asynchronous PS applies W small updates per round instead of one averaged one, so it moves
#   further per step, noisily, and with stale gradients.
# - **loss against time** is where the schemes differ on a real cluster: asynchronous workers never wait
#   for a straggler; local SGD spends 1/k of the communication; the parameter server saturates the server's
#   link as workers are added.
#
# ## 6. Fault tolerance
#
# Singh (2017) stresses that fault tolerance matters at scale, where machines in a large cluster or a cloud can
# fail or be preempted. The schemes fail differently:
#
# - **Allreduce** (and every synchronous collective scheme) is all-or-nothing: a rank that dies leaves the
#   others waiting inside the next allreduce. minidl turns that hang into a clean stop (`dist.run`: the
#   failing rank prints its error and calls `MPI_Abort`), and recovery means restarting from a checkpoint
#   (`dist.save_checkpoint`, bitwise resumable; tutorial 05).
# - A **synchronous parameter server** also waits for every worker each step; production systems add
#   backup workers and take the first W of W + b gradients (Chen et al. 2016).
# - An **asynchronous parameter server** does not depend on any one worker: a lost worker's gradients
#   just stop arriving, and the others keep training. The state to protect is the servers' (checkpoint
#   them, or replicate shards, as Li et al. 2014 do). minidl's protocol is strict instead: a worker that
#   vanishes without DONE keeps its server waiting, and errors abort the job rather than hide; MPI itself
#   offers no recovery from a dead process.
#
# So the centralized, asynchronous design buys tolerance of slow and lost workers, and pays with stale
# gradients and a server bandwidth bottleneck; allreduce is exact and bandwidth-optimal, and needs every
# rank healthy at every step.

# %% [markdown]
# ## 7. Killing a worker: what each scheme does
#
# minidl now builds the two recoveries above. The **parameter server** gives up on a worker that has sent
# nothing for `lost_after` seconds (`python -m minidl.train --parallel ps` uses `MINIDL_COMM_TIMEOUT`):
# asynchronous, it just goes on; synchronous, it either drops the worker (`drop_lost_workers=True`,
# `--drop-lost-workers`: the steps then average the workers left) or ends the job naming it. Here the last
# worker goes silent after 3 steps (alive, as a hung node; a process that really dies comes after this cell):


# %%
def lose_a_worker(asynchronous, drop, steps=8, lost_after=10.0):  # seconds: well above a step on a busy machine
    model = make_model()
    if dist.is_server(comm):
        server = dist.ParameterServer(
            model, sgd, comm, asynchronous=asynchronous, lost_after=lost_after, drop_lost_workers=drop
        )
        return server.serve()
    worker = dist.PSWorker(model, comm, asynchronous=asynchronous)
    for t in range(3 if RANK == P - 1 else steps):
        worker.zero_grad()
        loss_on(model, batch(t, RANK - 1, W)).backward()
        worker.step()
    if RANK != P - 1:
        worker.close()  # the silent worker never says DONE
    return None


if ON_RANKS and P >= 3:
    for asynchronous in (True, False):
        stats = lose_a_worker(asynchronous, drop=True)
        comm.Barrier()
        if RANK == 0:
            kind = "asynchronous" if asynchronous else "synchronous, drop_lost_workers"
            print(f"{kind}: lost worker(s) {stats.lost}, {stats.updates} gradients applied, {stats.rounds} rounds")

# %% [markdown]
# A worker that really dies is another matter for MPI: by default mpiexec ends every rank of a job when one
# exits abnormally. MPICH's `mpiexec -disable-auto-cleanup` (Open MPI: `mpiexec --with-ft ulfm`) lets the others
# run on. MPI then reports nothing about the dead rank (a receive from it simply never completes), so the
# servers go by silence, and the ranks left finish among themselves on a communicator without it
# (`parameter_server/survivors.py`). From a shell:
#
#     MINIDL_COMM_TIMEOUT=20 mpiexec -disable-auto-cleanup -n 4 python -m minidl.train lm --quick \
#         --parallel ps --async --max-steps 12 --inject-failure 3:6
#
# prints, after rank 3's `--inject-failure: exiting abruptly at step 6`, `parameter server 0: worker(s) 3 lost
# (silent 10 s), going on with 2 worker(s)`, the test perplexity, and `worker(s) 3 lost: finished on the 3 ranks
# left`. Synchronous with `--drop-lost-workers` it goes on the same way; synchronous without it, the job ends
# with one line naming the worker (`tests/test_ps_lost_worker_cli.py` runs all three).
#
# The **allreduce** job cannot go on without a rank (MPI has no recovery from a dead process), so it restarts
# around mpiexec from checkpoints, as Horovod Elastic and torchrun do. Run it from a shell (not under mpiexec):
#
#     python -m minidl.launch -n 3 --min-ranks 2 -- python -m minidl.train lm --quick --parallel data \
#         --save /tmp/lm.npz --save-every 20 --inject-failure 1:50
#
# Rank 1 dies at step 50 (`os._exit`, like a lost node); the launcher says so in one line, restarts on 2 ranks
# from the step-40 checkpoint, each rank now taking 15 of the 30 streams of the global batch, and the job ends
# where the same resume by hand ends (the test `tests/test_elastic_mpi.py` checks it, bitwise).
#
# How often to checkpoint? A job on N nodes fails N times as often as one node; writing a checkpoint costs C
# seconds, each failure loses the work since the last one. Young (1974) and Daly (2006) give the interval that
# loses least, sqrt(2 x C x job MTBF). Simulated, with a node failing once a year, C = 60 s, a restart 120 s:

# %%
if RANK == 0:
    from minidl.simulate import failures

    print("\n".join(failures.table([32, 256], 365 * 24 * 3600.0, 60.0, 120.0, [15 * 60.0, 60 * 60.0, 240 * 60.0])))
