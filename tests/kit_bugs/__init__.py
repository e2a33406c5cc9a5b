"""A catalogue of deliberately wrong collectives: the property-test kit must catch every one.

Each bug is a small, plausible student mistake made from one of the package's own pages (ring.py,
tree.py, recursive_doubling.py, prefix.py ...), with the kit's signature for its collective. The
modules group them by what goes wrong (ring_bugs: the ring's steps and buffers; result_bugs: the
array returned; root_bugs: roots and the tree; doubling_bugs: partners and order; block_bugs: which
block goes where; prefix_bugs: scans; comm_bugs: communicators; state_bugs: arrival order and state
kept between calls; mpi_bugs: what MPI itself catches or suffers, and exits).

``CATALOGUE`` lists them with what the kit should report: the property that breaks first (in the
order of ``collectives.testing.PROPERTIES``) and a bound on the shrunk case. tests/test_kit_catalogue.py
holds the kit to it; benchmarks/kit.py times how long the kit takes to find each.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kit_bugs import (
    block_bugs,
    comm_bugs,
    doubling_bugs,
    mpi_bugs,
    prefix_bugs,
    result_bugs,
    ring_bugs,
    root_bugs,
    state_bugs,
)


@dataclass(frozen=True)
class Bug:
    """One wrong collective: ``fn`` checked as ``collective``; the kit must fail ``prop`` (or one of ``also``,
    where another property is just as right for some drawn case) on a shrunk case for which ``small(case)``
    holds (``bound`` says it in words). ``uncaught``: a known gap of the kit (UNCAUGHT.md), run as a strict xfail."""

    fn: Callable[..., Any]
    collective: str
    prop: str
    bound: str
    small: Callable[[Any], bool]
    kwargs: dict = field(default_factory=dict)
    uncaught: str = ""
    also: tuple[str, ...] = ()

    @property
    def name(self) -> str:
        return self.fn.__name__


CATALOGUE = [
    # the classic classes of issue 22
    Bug(ring_bugs.remainder_dropped, "allreduce", "result", "p <= 4, n <= 16, n % p != 0",
        lambda c: c.p <= 4 and c.n <= 16 and c.n % c.p != 0),
    Bug(ring_bugs.allgather_one_step_short, "allreduce", "result", "p = 2, n <= 2", lambda c: c.p == 2 and c.n <= 2),
    Bug(doubling_bugs.powers_of_two_only, "allreduce", "result", "p = 3 or 5..7, n <= 4",
        lambda c: c.p in (3, 5, 6, 7) and c.n <= 4),
    Bug(result_bugs.broken_at_one_rank, "allreduce", "result", "p = 1, n <= 3", lambda c: c.p == 1 and c.n <= 3),
    Bug(result_bugs.empty_vector_broken, "allreduce", "completes", "n = 0, p = 1", lambda c: c.n == 0 and c.p == 1),
    Bug(ring_bugs.input_mutated, "allreduce", "inputs-untouched", "p = 2, n <= 2", lambda c: c.p == 2 and c.n <= 2),
    Bug(ring_bugs.op_ignored, "allreduce", "result", "p = 2, n <= 2, op not sum",
        lambda c: c.p == 2 and c.n <= 2 and c.op != "sum",
        also=("completes",)),  # np.add raises on maxloc/minloc's (value, index) pairs, even empty ones
    Bug(ring_bugs.send_then_recv, "allreduce", "completes", "p = 2, n <= 1", lambda c: c.p == 2 and c.n <= 1),
    Bug(ring_bugs.narrow_accumulation, "allreduce", "result", "p = 1, n <= 3, a 64-bit dtype",
        lambda c: c.p == 1 and c.n <= 3 and c.dtype in ("float64", "int64", "complex128")),
    Bug(doubling_bugs.rank_order_differs, "allreduce", "same-bits", "3 <= p <= 6, n <= 64, a float dtype",
        lambda c: 3 <= c.p <= 6 and c.n <= 64 and c.dtype.startswith(("float", "complex"))),
    Bug(ring_bugs.tail_segment_lost, "allreduce", "result", "p = 2, 8192 < n <= 16384, n % 8192 != 0",
        lambda c: c.p == 2 and 8192 < c.n <= 16384 and c.n % 8192 != 0),
    Bug(root_bugs.ranks_above_8_forgotten, "allreduce", "result", "p = 9, n <= 2", lambda c: c.p == 9 and c.n <= 2),
    # more that a kit might miss
    Bug(root_bugs.reduce_root_zero_only, "reduce", "result", "p = 2, root = 1, n <= 2",
        lambda c: c.p == 2 and c.root == 1 and c.n <= 2),
    Bug(root_bugs.broadcast_from_rank_zero, "broadcast", "result", "p = 2, root = 1, n <= 2",
        lambda c: c.p == 2 and c.root == 1 and c.n <= 2),
    Bug(root_bugs.broadcast_by_masked_sum, "broadcast", "result", "p = 2, n <= 16, a float dtype",
        lambda c: c.p == 2 and c.n <= 16 and c.dtype.startswith(("float", "complex"))),
    Bug(block_bugs.allgather_arrival_order, "allgather", "result", "p = 2, n <= 2", lambda c: c.p == 2 and c.n <= 2),
    Bug(block_bugs.alltoall_indices_swapped, "alltoall", "result", "p = 3, n <= 2", lambda c: c.p == 3 and c.n <= 2),
    Bug(block_bugs.reduce_scatter_floor_blocks, "reduce_scatter", "shape-dtype", "p = 2, n <= 3, n % p != 0",
        lambda c: c.p == 2 and c.n <= 3 and c.n % 2 != 0),
    Bug(prefix_bugs.exscan_includes_own, "exscan", "result", "p = 2, n <= 2", lambda c: c.p == 2 and c.n <= 2),
    Bug(prefix_bugs.scan_reversed, "scan", "result", "p = 2, n <= 2", lambda c: c.p == 2 and c.n <= 2),
    Bug(comm_bugs.leaders_rank_on_parent_comm, "allreduce", "completes", "p = 3, n <= 2",
        lambda c: c.p == 3 and c.n <= 2),
    Bug(result_bugs.view_of_input, "allreduce", "inputs-untouched", "p = 1, n <= 3", lambda c: c.p == 1 and c.n <= 3),
    Bug(result_bugs.wrong_dtype, "allreduce", "shape-dtype", "p = 1, n = 0, float16 or float32",
        lambda c: c.p == 1 and c.n == 0 and c.dtype in ("float16", "float32")),
    Bug(result_bugs.right_only_on_rank0, "allreduce", "result", "p = 2, n <= 1", lambda c: c.p == 2 and c.n <= 1),
    Bug(result_bugs.output_2d, "allreduce", "shape-dtype", "p = 1, n = 0", lambda c: c.p == 1 and c.n == 0),
    Bug(result_bugs.inplace_rebinds_name, "allreduce", "result", "p = 2, n <= 1", lambda c: c.p == 2 and c.n <= 1,
        kwargs={"inplace": True}),
    Bug(ring_bugs.empty_blocks_skipped, "allreduce", "completes", "p = 2, n = 0", lambda c: c.p == 2 and c.n == 0),
    Bug(doubling_bugs.whole_vectors_everywhere, "allreduce", "cost", "p = 2, n <= 1", lambda c: c.p == 2 and c.n <= 1,
        kwargs={"cost": "ring"}),
    Bug(ring_bugs.polls_wrong_peer, "allreduce", "completes", "p = 3, n <= 2", lambda c: c.p == 3 and c.n <= 2,
        kwargs={"timeout": 1.0}),  # 20 s a case by default
    Bug(ring_bugs.medium_range_broken, "allreduce", "result", "p <= 3, 1024 <= n <= 8192, n % p != 0",
        lambda c: c.p <= 3 and 1024 <= c.n <= 8192 and c.n % c.p != 0),
    Bug(state_bugs.result_buffer_reused, "allreduce", "repeatable", "p = 1, n <= 3", lambda c: c.p == 1 and c.n <= 3,
        also=()),  # the first call's result is copied as it returns: the overwrite is the second call's doing
    Bug(state_bugs.gather_any_source, "gather", "result", "p >= 3 (12 runs: p = 3 eleven times, p = 4 once)",
        lambda c: c.p >= 3, also=("repeatable",)),  # a race shows in either call, and shrinks as far as re-runs fail
    # what MPI itself catches or suffers (issue 31), and ways out of a call
    Bug(mpi_bugs.truncated_receive, "allreduce", "truncation", "p = 2, n = 1", lambda c: c.p == 2 and c.n == 1),
    Bug(mpi_bugs.sendrecv_one_buffer, "allreduce", "no-aliasing", "p = 2, n = 1", lambda c: c.p == 2 and c.n == 1),
    Bug(mpi_bugs.isend_never_waited, "allreduce", "request-completed", "p = 2, n = 0",
        lambda c: c.p == 2 and c.n == 0),
    Bug(mpi_bugs.isend_buffer_overwritten, "allreduce", "send-buffer-untouched", "p = 2, n = 1",
        lambda c: c.p == 2 and c.n == 1),
    Bug(mpi_bugs.reduce_partial_off_root, "reduce", "result", "p = 2, n = 0", lambda c: c.p == 2 and c.n == 0),
    Bug(mpi_bugs.exits_on_empty_input, "allreduce", "completes", "p = 1, n = 0", lambda c: c.p == 1 and c.n == 0),
    Bug(mpi_bugs.os_exit_on_one_rank, "allreduce", "completes", "p = 1, n = 0", lambda c: c.p == 1 and c.n == 0),
]  # fmt: skip
