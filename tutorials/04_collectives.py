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
# # 04 - Allreduce: naive, tree, ring, Rabenseifner, from point-to-point messages
#
# Data-parallel training keeps one replica of the model per rank. Each rank computes gradients on its
# own share of the batch; before the optimizer step the gradients are **summed over all ranks** and
# every rank needs the sum. That operation, "reduce, and give everyone the result", is *allreduce*,
# and with gradients of millions of parameters it is the communication cost of data parallelism
# (Horovod is, at its heart, a fast allreduce).
#
# The package `collectives/` writes every classic allreduce algorithm on MPI's point-to-point calls
# (`Send`, `Recv`, `Sendrecv`), one file each, each opening with its cost. In this lesson we
# 1. run them on a simulated communicator (threads in this process) and check them against NumPy;
# 2. draw each one's schedule from the simulator's record of every message;
# 3. count messages and bytes and match them with the alpha-beta-gamma cost model;
# 4. let the model choose an algorithm by message size, as MPICH does;
# 5. measure real MPI times against the model (this step starts `mpiexec` itself).
#
# Run it as a script (`python tutorials/04_collectives.py`, `--quick` for a seconds-long run) or as a
# notebook with Jupytext. It needs no `mpiexec`: the ranks are simulated.

# %%
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np

import collectives
from collectives import cost
from collectives.common import TAG_CHECK
from collectives.inprocess import traffic
from minidl.tools import tutorial

QUICK = tutorial.quick()  # --quick or MINIDL_QUICK=1 (how a notebook is told)
try:
    import matplotlib.pyplot as plt
except ImportError:  # the figures are optional; everything else runs without matplotlib
    plt = None

# %% [markdown]
# ## 1. A communicator you can hold in your hand
#
# `collectives.simulate(P, fn, *args)` runs `fn(comm, *args)` on P threads. Each `comm` speaks the
# subset of mpi4py the algorithms use, with MPI's rules: messages match by source and tag, sends are
# *synchronous* (they finish only when received, so code that would deadlock under MPI deadlocks
# here too, and is reported instead of hanging). The same function runs unchanged on
# `MPI.COMM_WORLD` under `mpiexec`.
#
# Four ranks each hold a "gradient"; after `allreduce` every rank holds the sum.

# %%
P = 4
grads = [np.arange(6, dtype=np.float32) * (r + 1) for r in range(P)]


def step(comm, algorithm):
    return collectives.allreduce(comm, grads[comm.Get_rank()], op="sum", algorithm=algorithm)


result = collectives.simulate(P, step, "ring")
print("rank 0 got", result[0], " NumPy says", np.sum(grads, axis=0))
assert all(np.array_equal(r, result[0]) for r in result)

# %% [markdown]
# The result carries the record of every message: its logical `step` (the sender's clock when it
# sent), `source`, `dest`, `tag`, `nbytes`, and `arrival` (the receiver's clock when it got it).
# Each rank's clock moves one step per completed blocking call, and past the send step of every
# message it receives, so a step is one round of communication. Every public collective first
# checks that all ranks brought the same shape, dtype and op: a recursive-doubling handshake of
# short messages (this rank's header, 88 bytes plus 8 a dimension of its shape, and a mismatch flag,
# `TAG_CHECK`), and the full table of headers only after a mismatch, to name it. We leave those
# messages out of the pictures. (For a short vector the handshake carries the data as well and *is*
# the allreduce: `collectives/agreement.py` tells how that saves a latency-bound round.)

# %%
for m in result.messages[:6]:
    print(m)


# %% [markdown]
# ## 2. Drawing a schedule
#
# Ranks run top to bottom, logical time left to right, and each message is an arrow from
# (send step, source) to (arrival, destination), colored by its phase (its tag) and as wide as its
# bytes: `collectives.diagram.spacetime(messages, p)` draws any simulated run this way.

# %%
from collectives.diagram import spacetime


def draw(p, algorithm, n=24, title=None):
    """Simulate one allreduce of n float32 per rank and draw its messages (the check left out)."""
    res = collectives.simulate(
        p, lambda comm: collectives.allreduce(comm, np.ones(n, np.float32), algorithm=algorithm, check=False)
    )
    messages = [m for m in res.messages if m.tag != TAG_CHECK]
    count, nbytes = traffic(messages, p)
    print(f"{algorithm:>18} p={p}: {res.rounds} rounds, messages per rank {count}, bytes per rank {nbytes}")
    if plt is not None:
        fig = spacetime(messages, p, title=title or f"{algorithm}, p = {p} (arrow width ~ bytes)")
        tutorial.show(fig, f"04_schedule_{algorithm}_p{p}.png")
    return res


# %% [markdown]
# ## 3. Naive: everyone sends to the root
#
# Rank 0 receives p - 1 vectors one after the other, adds them, and sends the sum back p - 1 times:
# $2(p-1)$ rounds, and the root moves $2(p-1)n$ bytes while the others each move $2n$. Cost
# $2(p-1)\alpha + 2(p-1)n\beta + (p-1)n\gamma$: every term grows linearly with p. The root is the
# bottleneck; all the other algorithms exist to spread its work.

# %%
res = draw(6, "naive")

# %% [markdown]
# ## 4. Binomial tree: reduce up, broadcast down
#
# In the reduce, rank r receives from r + 1, r + 2, r + 4, ... (the ranks below its lowest set bit)
# and passes its subtree's sum to its parent; the broadcast sends the result back down the same
# edges. $\lceil\log_2 p\rceil$ rounds each way instead of p - 1, but every round still carries the
# whole vector: $2L\alpha + 2Ln\beta + Ln\gamma$ with $L = \lceil \log_2 p \rceil$.

# %%
res = draw(8, "tree")

# %% [markdown]
# ## 5. Ring: reduce-scatter, then allgather
#
# Cut the vector into p blocks. In each of p - 1 steps every rank sends one block to its right
# neighbour and adds the block arriving from its left into its own copy; after p - 1 steps rank r
# holds block r summed over everyone (reduce-scatter). p - 1 more steps pass the finished blocks
# round (allgather). All links are busy at once and each carries only $n/p$ per step:
# $2(p-1)\alpha + 2\frac{p-1}{p}n\beta + \frac{p-1}{p}n\gamma$. The bandwidth term is the lower
# bound for any allreduce and does not grow with p, which is why Baidu and Horovod use the ring for
# gradients. The price: $2(p-1)$ latencies.

# %%
res = draw(6, "ring")
count, nbytes = traffic([m for m in res.messages if m.tag != TAG_CHECK], 6)
print("ring bytes per rank / vector bytes:", [b / (24 * 4) for b in nbytes], " 2(p-1)/p =", 2 * 5 / 6)

# %% [markdown]
# ### Following one ring, block by block
#
# `collectives.explain` runs the real schedule on the simulator with every message's bytes
# recorded, and decodes each message: which block it carries, and whose contributions are summed
# in it. (Rank r's element i is $2^r + 2^p i$, so the low p bits of any partial sum name the ranks
# in it.) Read a column down to follow one rank; follow "b0" across the rows to watch block 0 go
# round the ring, gaining one contribution a step, until rank 0 holds it complete after step 3 and
# the allgather passes it on. The same table is the worked example at the top of
# `collectives/algorithms/ring.py`, and a test holds the two together.

# %%
table = collectives.explain("ring", p=4, n=8)

# %% [markdown]
# The same run as a picture: each arrow is one message of the table, labelled with the block it carries and
# whose contributions are summed in it. Follow b0: rank 1 sends its share to rank 2 (b0=x1), which adds its
# own and passes it on (b0=x1+x2), and so on round the ring until rank 0 adds x0 to the last one; then the
# allgather's arrows carry the finished block on to the three other ranks.

# %%
from collectives.walkthrough import describe_message, rank_vectors

xs = rank_vectors(4, 8)
res = collectives.simulate(
    4, lambda comm: collectives.ring.allreduce(comm, xs[comm.Get_rank()], np.add), record_data=True
)
if plt is not None:
    carried = [describe_message(m, 4, 8).split(" -> ")[0] for m in res.messages]  # "b3=x0+x1": the arrow says "-> 2"
    fig = spacetime(res.messages, 4, labels=carried, title="ring allreduce, p = 4, n = 8: what each message carries")
    tutorial.show(fig, "04_ring_spacetime_p4.png")

# %% [markdown]
# ## 6. Recursive doubling and Rabenseifner
#
# **Recursive doubling** swaps the whole partial sum with partners 1, 2, 4, ... away: only
# $\log_2 p$ rounds, the fewest possible, but each carries all n bytes. The short-message algorithm.
#
# **Rabenseifner** does a reduce-scatter by *recursive halving* (exchange half the vector with the
# rank p/2 away, keep and reduce the other half, then a quarter with the rank p/4 away, ...) and an
# allgather by recursive doubling: the ring's bandwidth term with only $2\log_2 p$ rounds. MPICH
# uses it for long messages.
#
# Both need a power of two. With p = 6, MPICH first *folds* the extra ranks in: the first
# 2 (p - 4) = 4 ranks pair up as (0, 1), (2, 3); the even rank hands its vector to the odd one and
# sits out; the 4 remaining ranks run the power-of-two algorithm; at the end the odd ranks hand the
# result back. That costs two extra rounds and two full vectors, visible as the first and last
# arrows below.

# %%
res = draw(8, "recursive_doubling")
res = draw(6, "recursive_doubling", title="recursive doubling, p = 6 (fold in, 2 exchanges, fold out)")
res = draw(8, "rabenseifner")
res = draw(6, "rabenseifner")

# %% [markdown]
# ## 7. The record agrees with the cost model
#
# `collectives.cost` writes each algorithm's cost as multiples of alpha (rounds), beta (bytes
# sent along the critical path) and gamma (bytes reduced), and also predicts how many messages each
# rank sends and how many bytes cross the wire. The tests hold every algorithm to these numbers for
# p = 1 ... 16; here is the check for a few.

# %%
n = 1000
for algorithm in collectives.ALGORITHMS:
    for p in (4, 5, 8):
        res = collectives.simulate(
            p, lambda comm, a=algorithm: collectives.allreduce(comm, np.ones(n, np.float32), algorithm=a, check=False)
        )
        count, nbytes = traffic(res.messages, p)
        assert count == cost.messages_per_rank(algorithm, p)
        assert sum(nbytes) == cost.total_bytes(algorithm, p, 4 * n)
        assert res.rounds == cost.terms(algorithm, p, 4 * n).rounds
        t = cost.terms(algorithm, p, 4 * n)
        print(
            f"{algorithm:>18} p={p}: rounds {t.rounds:2d}, bytes on the critical path {t.sent / (4 * n):.2f} n, "
            f"total on the wire {sum(nbytes) / (4 * n):.1f} n  (record agrees)"
        )

# %% [markdown]
# ## 8. Choosing by size, as MPICH does
#
# MPICH switches algorithms at message-size thresholds. `collectives.allreduce(..., algorithm="auto")`
# does the same from the model: it predicts every algorithm's time for this p and size and takes the
# fastest. `collectives.choose_algorithm(p, nbytes)` shows the choice. The parameters are built-in
# values measured on a 2-core development machine, or whatever `cost.calibrate(comm)` measures
# (exchanges of short and long messages for alpha and beta, a local `np.add` for gamma).

# %%
params = cost.get_params()
print(
    f"alpha = {params.alpha * 1e6:.1f} us, beta = {params.beta * 1e9:.3f} ns/byte, "
    f"gamma = {params.gamma * 1e9:.3f} ns/byte"
)
sizes = [2**k for k in range(6, 27, 2)]
for p in (2, 3, 4, 8, 16):
    print(
        f"p={p:2d}: "
        + "  ".join(
            f"{s >> 10 if s >= 1024 else s}{'K' if s >= 1024 else 'B'}:{collectives.choose_algorithm(p, s)[0][:4]}"
            for s in sizes
        )
    )

if plt is not None:
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    many = np.logspace(2, 27, 60, base=2)
    for ax, p in zip(axes, (4, 6)):
        for algorithm in collectives.ALGORITHMS:
            ax.loglog(many, [cost.predict(algorithm, p, s) * 1e6 for s in many], label=algorithm)
        ax.set(xlabel="bytes per rank", ylabel="predicted time (us)", title=f"cost model, p = {p}")
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    tutorial.show(fig, "04_cost_model.png")

# %% [markdown]
# ## 9. The model against real MPI
#
# Now real processes. `python -m collectives.bench` runs every algorithm under `mpiexec`, times it
# (median over repeats of the slowest rank), checks each result against `MPI.Allreduce`, and prints
# the model's prediction beside the measurement. We start it from here with 2 ranks; on a shared
# 2-core machine the numbers are noisy, and with more ranks than cores MPICH's busy-polling makes
# everything slow, for MPI's own Allreduce as much as for ours.

# %%
mpiexec = shutil.which("mpiexec", path=str(Path(sys.executable).parent)) or shutil.which("mpiexec")
bench_sizes = "1K,64K,1M" if QUICK else "1K,16K,256K,4M,16M"
rows = []
if mpiexec is None:
    print("mpiexec not found: skipping the measurement (pip install mpi4py mpich)")
else:
    cmd = [
        mpiexec,
        "-n",
        "2",
        sys.executable,
        "-m",
        "collectives.bench",
        "--sizes",
        bench_sizes,
        "--json",
        "--algorithms",
        "recursive_doubling,ring,tree,auto",
        "--repeats",
        "10" if QUICK else "40",
    ]
    print(" ".join(cmd[:1] + ["-n", "2", "python"] + cmd[4:]))
    done = subprocess.run(
        cmd, capture_output=True, text=True, timeout=600, cwd=Path(collectives.__file__).resolve().parents[1]
    )
    if done.returncode != 0:
        print("the benchmark failed:", done.stderr[-2000:])
    else:
        import json

        report = json.loads(done.stdout)
        rows = report["rows"]
        print(
            f"calibrated: alpha {report['params']['alpha'] * 1e6:.1f} us, beta {report['params']['beta'] * 1e9:.3f}"
            f" ns/B, gamma {report['params']['gamma'] * 1e9:.3f} ns/B"
        )
        print(f"{'size':>9} {'algorithm':>28} {'measured us':>12} {'model us':>9} {'x MPI':>6} {'#wrong':>6}")
        for r in rows:
            model = f"{r['predicted_us']:9.1f}" if r["predicted_us"] else f"{'-':>9}"
            print(
                f"{r['size']:>9} {r['algorithm']:>28} {r['time_us']:12.1f} {model} {r['x_mpi_time']:6.2f} "
                f"{r['wrong']:>6}"
            )

# %% [markdown]
# The bench's own predictions used the parameters it calibrated at start-up. Where the model is
# off, the reason is usually visible: for the shortest messages, a constant per call that the
# model leaves out (checking the arguments, allocating the result, the agreement check: a few
# microseconds of Python); for long ones, memory traffic beyond one pass per byte; and on a shared
# machine, the other processes on the same cores.

# %%
if plt is not None and rows:
    fig, ax = plt.subplots(figsize=(6, 4))
    for i, name in enumerate(sorted({r["algorithm"] for r in rows})):
        mine = [r for r in rows if r["algorithm"] == name]
        ax.loglog([r["size"] for r in mine], [r["time_us"] for r in mine], "o-", color=f"C{i}", label=name)
        if mine[0]["predicted_us"]:
            ax.loglog([r["size"] for r in mine], [r["predicted_us"] for r in mine], "--", color=f"C{i}", alpha=0.6)
    ax.set(xlabel="bytes per rank", ylabel="time (us)", title="p = 2: measured (solid) and cost model (dashed)")
    ax.legend(fontsize=7)
    tutorial.show(fig, "04_measured_vs_model.png")

# %% [markdown]
# ## 10. Running on real ranks
#
# Every function above takes any communicator with mpi4py's point-to-point calls. In a script:
#
# ```python
# from mpi4py import MPI
# import numpy as np, collectives
# comm = MPI.COMM_WORLD
# g = np.random.default_rng(comm.Get_rank()).standard_normal(1_000_000).astype(np.float32)
# total = collectives.allreduce(comm, g, op="sum", algorithm="auto")   # same bits on every rank
# ```
#
# and run it with `mpiexec -n 4 python script.py`; the full benchmark is
# `mpiexec -n 4 python -m collectives.bench --plot`. Ranks that bring different shapes or dtypes
# all get the same `collectives.MismatchError` naming who brought what, never a hang:


# %%
def mismatched(comm):
    try:
        collectives.allreduce(comm, np.ones(3 + (comm.Get_rank() == 1), np.float32))
    except collectives.MismatchError as e:
        return str(e)


print(collectives.simulate(3, mismatched)[2])

# %% [markdown]
# ## 11. The rest of MPI's collectives
#
# The same package has barrier (dissemination), alltoall (pairwise exchange and Bruck's algorithm)
# and alltoallv, allgatherv/gatherv/scatterv, reduce_scatter with given counts, scan and exscan
# (a recursive-doubling prefix), the logical and bitwise ops, and maxloc/minloc on
# (value, index) pairs. Each file opens with its cost and a worked example. For instance, which
# rank has the largest loss, and the running total of the batch sizes before each rank:


# %%
def where_and_prefix(comm):
    r = comm.Get_rank()
    loss, batch = [0.7, 2.5, 2.5, 1.1][r], [32, 30, 32, 28][r]
    worst = collectives.allreduce(comm, collectives.pairs(loss, r), op="maxloc")
    offset = collectives.exscan(comm, np.array(batch))
    return float(worst["value"]), int(worst["index"]), None if offset is None else int(offset)


for r, (value, index, offset) in enumerate(collectives.simulate(4, where_and_prefix)):
    print(f"rank {r}: largest loss {value} on rank {index} (ties: the lower rank); samples before mine: {offset}")

# %% [markdown]
# ## 12. Test your own allreduce
#
# Writing a collective is easy to get almost right: a block lost when n is not divisible by p, a
# schedule correct only for powers of two, ranks that add in different orders and end with
# different bits. `collectives.testing` checks a function with the signature of `ring.py`'s
# `allreduce(comm, x, f)` the way the package checks its own: hypothesis draws the number of ranks
# (1..16), the length (0, 1, below p, not divisible by p, over 10,000), every dtype and op, the
# rank layout (the world, reversed, halves and odd/even through `Split`), and the value range; the
# ranks send synchronously, so a schedule that needs buffering deadlocks and is reported. On a
# failure hypothesis shrinks the case to the smallest that still fails, and the report shows it.
# In a pytest file, the whole test is
#
# ```python
# from collectives.testing import allreduce_property
#
# def test_my_allreduce():
#     allreduce_property(my_allreduce)
# ```
#
# and from a shell `python -m collectives.check my_ring.py:my_allreduce` (exit 0, or 1 with the
# counterexample), or `mpiexec -n 4 python -m collectives.check my_ring.py:my_allreduce --mpi` on real
# ranks. Here is a first attempt at a ring that only passes vectors round and adds what arrives.
# It is right on 1 and 2 ranks and wrong from 3 on:


# %%
def my_allreduce(comm, x, f):
    r, p = comm.Get_rank(), comm.Get_size()
    acc, passing = x.copy(), x.copy()
    for _ in range(p - 1):
        incoming = np.empty_like(x)
        comm.Sendrecv(passing, (r + 1) % p, 0, incoming, (r - 1) % p, 0)
        f(acc, incoming, out=acc)
        passing = acc  # the bug: it should pass on what arrived, not its running sum
    return acc


from collectives.testing import PropertyFailure, check  # noqa: E402

try:
    check(
        my_allreduce,
        "allreduce",
        examples=50 if QUICK else 200,
        diagram=str(tutorial.out_dir() / "04_my_allreduce.png"),
    )
except PropertyFailure as failure:
    print(failure)

# %% [markdown]
# The smallest failing case is 3 ranks, and the step table shows why: at step 2 rank 0 sends
# `(x0+x2)`, its running sum, where a ring passes on what arrived (`x2`), so rank 1 counts x0
# twice. The space-time diagram (`tutorials/out/04_my_allreduce.png`) draws the same messages.
# Passing on what arrived fixes the sum; the kit then finds a second, subtler bug:


# %%
def my_allreduce_2(comm, x, f):
    r, p = comm.Get_rank(), comm.Get_size()
    acc, passing = x.copy(), x.copy()
    for _ in range(p - 1):
        incoming = np.empty_like(x)
        comm.Sendrecv(passing, (r + 1) % p, 0, incoming, (r - 1) % p, 0)
        f(acc, incoming, out=acc)
        passing = incoming  # fixed: pass on what arrived
    return acc


try:
    check(my_allreduce_2, "allreduce", examples=50 if QUICK else 200, diagram="")
except PropertyFailure as failure:
    print("\n".join(str(failure).splitlines()[:4]))

# %% [markdown]
# Every rank now holds the sum, but rank r adds x_r + x_(r-1) + x_(r-2) + ..., a different order
# on every rank, and float addition is not associative: in float16 one rank ends 2 units in the
# last place away from the others. Data-parallel replicas that start equal would drift apart.
# The cure is the one every algorithm in `collectives/` uses: combine the operands in the same
# order on every rank (here: keep each rank's vector and add them in rank order).


# %%
def my_allreduce_3(comm, x, f):
    r, p = comm.Get_rank(), comm.Get_size()
    vectors = {r: x}
    passing = x
    for step in range(1, p):
        incoming = np.empty_like(x)
        comm.Sendrecv(passing, (r + 1) % p, 0, incoming, (r - 1) % p, 0)
        vectors[(r - step) % p] = passing = incoming
    acc = vectors[0].copy()
    for source in range(1, p):  # rank order, the same on every rank
        f(acc, vectors[source], out=acc)
    return acc


print(check(my_allreduce_3, "allreduce", examples=50 if QUICK else 200))
try:  # correct, but is it a ring allreduce? the kit can hold it to the ring's cost model too
    check(my_allreduce_3, "allreduce", cost="ring", examples=20, diagram="")
except PropertyFailure as failure:
    print("\n".join(str(failure).splitlines()[:2]))

# %% [markdown]
# It sends p - 1 messages of the whole vector, (p - 1) n elements per rank, where the ring sends
# 2 (p - 1) messages of n/p: the same answer at p/2 times the bandwidth. Exercises 3 to 5
# (`python -m minidl.exercises list`) ask for the real ring, the binomial broadcast and recursive
# doubling, checked by this same kit.

# %% [markdown]
# ## 13. Grading a class
#
# A course hands out its own template, `def ring(send, recv, comm, op)`: the input, an output buffer
# to fill, the communicator, and a Python function that combines two arrays; it promises float64 sums
# with at least as many elements as ranks. `--signature` and the contract options tell the kit so,
# and `--grade DIR` judges a whole folder of submissions, each in a process of its own with a time
# and a memory limit, so that a file that hangs, crashes or does not even import is a verdict, not
# the end of the run. Here are four: the rank-order ring above in the course's signature, the
# running-sum bug, a ring that sends before it receives, and one with a syntax error.

# %%
RANK_ORDER = """import numpy as np


def ring(send, recv, comm, op):
    r, p = comm.Get_rank(), comm.Get_size()
    vectors, passing = {r: send}, send
    for step in range(1, p):
        incoming = np.empty_like(send)
        comm.Sendrecv(passing, (r + 1) % p, 0, incoming, (r - 1) % p, 0)
        vectors[(r - step) % p] = passing = incoming
    acc = vectors[0]
    for source in range(1, p):  # rank order, the same on every rank
        acc = op(acc, vectors[source])
    recv[:] = acc
"""
submissions = {
    "ana.py": RANK_ORDER,
    "ben.py": RANK_ORDER.replace("vectors[(r - step) % p] = passing = incoming",
                                 "vectors[(r - step) % p] = incoming\n        passing = send + incoming"),
    "carl.py": RANK_ORDER.replace("comm.Sendrecv(passing, (r + 1) % p, 0, incoming, (r - 1) % p, 0)",
                                  "comm.Send(passing, (r + 1) % p)\n        comm.Recv(incoming, (r - 1) % p)"),
    "dora.py": RANK_ORDER.replace("def ring(send, recv, comm, op):", "def ring(send, recv, comm, op)"),
}  # fmt: skip
hw3 = tutorial.out_dir() / "hw3"
shutil.rmtree(hw3, ignore_errors=True)
hw3.mkdir()
for name, source in submissions.items():
    (hw3 / name).write_text(source)
grade = [sys.executable, "-m", "collectives.check", "--grade", str(hw3), "--function", "ring"]
grade += ["--signature", "send,recv,comm,op", "--dtypes", "float64", "--ops", "sum", "--min-n", "p"]
grade += ["--examples", "10" if QUICK else "100", "--seed", "1", "--timeout", "120"]
grade += ["--json", str(tutorial.out_dir() / "04_grades.json")]
print(subprocess.run(grade, capture_output=True, text=True, timeout=900).stdout)

# %% [markdown]
# Ben's ring passes on `send + incoming`, its own vector plus what arrived: right at p = 2, where there
# is one step, and wrong from p = 3 (the smallest case says so). Carl's deadlocks under synchronous
# sends, as it would under MPI for long messages. Dora's never imports. Each full report is in
# `tutorials/out/hw3-reports/`, and the JSON holds the same rows for a gradebook:

# %%
import json  # noqa: E402

for row in json.loads((tutorial.out_dir() / "04_grades.json").read_text()):
    print(f"{row['submission']:6} passed={row['passed']!s:5} {row['property'][:40]:40} {row['case'][:40]}")

# %% [markdown]
# [Checking an assignment you already give](../docs/assignments.md) explains the roles, the contract
# options (and why the kit's default is the full contract), the limits and every verdict;
# `python -m minidl.exercises grade DIR NAME` grades a class's copies of one of minidl's exercises.

# %% [markdown]
# ## What to take away
# - Naive is linear in p in every term; the tree fixes the latency, the ring the bandwidth;
#   Rabenseifner gets the ring's bandwidth with the tree's number of rounds.
# - Non-powers of two cost recursive doubling and Rabenseifner two extra rounds (MPICH's fold).
# - The alpha-beta-gamma model predicts the message counts exactly and the times roughly; "auto"
#   uses it to switch algorithms by size, as MPI libraries do with tuned thresholds.

# %% [markdown]
# **Exercises 3, 4 and 5**: the ring allreduce, the binomial-tree broadcast and recursive doubling for any p
# (with MPICH's fold), each from a skeleton with the math in its docstring:
# `python -m minidl.exercises start ring_allreduce`, then `python -m minidl.exercises check ring_allreduce`
# (likewise `tree_broadcast`, `recursive_doubling`). The checker runs this kit on your function, then holds it
# to the algorithm's cost counted from the messages: a ring sends 2 (p - 1) messages of n/p to its right
# neighbour only, a binomial broadcast takes ceil(log2 p) rounds. `--submit` adds inputs from a fresh seed and
# hidden cases, compared by hash.
