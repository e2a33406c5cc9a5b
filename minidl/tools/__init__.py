"""The commands and helpers around the library; nothing in the textbook core depends on them.

    info.py      python -m minidl.info: the BLAS kernel, CPU ISA, MPI, measured sgemm GFLOP/s
    launch.py    python -m minidl.launch: an elastic job, restarted from its newest checkpoint
    plot.py      python -m minidl.plot: a run's curves from its --log-json records
    progress.py  what the training loop prints: progress lines, throughput, --log-json records
    viz.py       the autograd graph as dot text or a picture; space-time diagrams of collectives
    tutorial.py  what the tutorials share as scripts and as notebooks
    measure.py   interleaved repeats, medians with their spread, peak RSS
    memory.py    glibc's malloc thresholds, fixed on ``import minidl``
    threads.py   one BLAS thread per rank when ranks share a node

``python -m minidl.info``, ``minidl.launch`` and ``minidl.plot`` keep their names: minidl/info.py, launch.py and
plot.py are entry points that run these modules (``python -m minidl.tools.info`` works as well).
"""
