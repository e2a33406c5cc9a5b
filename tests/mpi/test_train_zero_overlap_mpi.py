"""python -m minidl.train lm under mpiexec: --parallel zero (every stage) and --overlap end where --parallel data ends."""

import json

import numpy as np
import pytest
from mpi4py import MPI

from minidl.train import lm

FLAGS = ["--quick", "--max-steps", "12", "--dtype", "float64", "--log-every", "100"]


def final(extra):
    return lm.main(FLAGS + extra)["params"]


def test_zero_stages_and_overlap_end_where_data_parallelism_ends():
    reference = final(["--parallel", "data"])
    overlapped = final(["--parallel", "data", "--overlap"])
    for name, value in reference.items():
        assert np.array_equal(value, overlapped[name]), f"--overlap changed {name}"
    rows = final(["--parallel", "data", "--overlap", "--sparse-embedding"])  # embedding gradient by rows
    for name, value in reference.items():  # bitwise at 2 ranks (0 + a + b = a + b), the sum's order beyond
        np.testing.assert_allclose(rows[name], value, rtol=1e-12, atol=1e-14, err_msg=f"--sparse-embedding {name}")
    for stage in ("1", "2", "3"):
        sharded = final(["--parallel", "zero", "--zero-stage", stage])
        for name, value in reference.items():  # clipping sums the norm in another order: 1e-12, not bitwise
            np.testing.assert_allclose(sharded[name], value, rtol=1e-10, atol=1e-12, err_msg=f"stage {stage} {name}")


@pytest.mark.parametrize("mode", [["--parallel", "data", "--overlap"], ["--parallel", "zero", "--zero-stage", "2"]])
def test_timeline_is_a_chrome_trace_with_every_rank(mode):
    path = f"/tmp/minidl-timeline-{MPI.COMM_WORLD.Get_size()}-{mode[1]}.json"  # the same path on every rank
    lm.main(FLAGS + mode + ["--timeline", path])
    if MPI.COMM_WORLD.Get_rank() == 0:
        events = json.load(open(path))["traceEvents"]
        spans = [e for e in events if e["ph"] == "X"]
        assert {e["pid"] for e in spans} == set(range(MPI.COMM_WORLD.Get_size()))
        assert {"forward", "backward", "update"} <= {e["name"] for e in spans}
