"""--timeline's Chrome trace: one pid per rank, every bucket's allreduce with its algorithm and bytes."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers.overlap import make_model

import collectives
import minidl
import minidl.distributed as dist
from minidl.distributed import timeline as tl


def trained(comm, path: str, overlap: bool) -> None:
    import minidl.nn.functional as F
    from minidl import optim

    dist.init(comm)
    model = make_model()
    opt = dist.DistributedOptimizer(optim.SGD(model.parameters(), lr=0.1), fusion_bytes=200, overlap=overlap)
    opt.timeline = timeline = dist.Timeline(comm)
    rng = np.random.default_rng(comm.Get_rank())
    for _ in range(2):
        x, y = rng.standard_normal((4, 6)), rng.integers(0, 3, size=4)
        opt.zero_grad()
        with timeline.span("forward"):
            loss = F.cross_entropy(model(minidl.tensor(x)), y)
        with timeline.span("backward"):
            loss.backward()
        with timeline.span("update"):
            opt.step()
    timeline.write(path)


@pytest.mark.parametrize("overlap", [False, True])
def test_the_trace_has_every_rank_and_every_bucket(tmp_path, overlap):
    path = str(tmp_path / "trace.json")
    collectives.simulate(3, trained, path, overlap)
    trace = json.load(open(path))
    events = tl.load(path)
    assert {e["pid"] for e in events} == {0, 1, 2}
    names = {e["args"]["name"] for e in trace["traceEvents"] if e["ph"] == "M" and e["name"] == "process_name"}
    assert names == {"rank 0", "rank 1", "rank 2"}
    allreduces = [e for e in events if "allreduce" in e["name"]]
    buckets = len({e["name"] for e in allreduces})
    assert buckets > 1 and len(allreduces) == 3 * 2 * buckets  # ranks x steps x buckets
    assert all(e["args"]["algorithm"] == "ring" and e["args"]["bytes"] > 0 for e in allreduces)
    assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in events)
    assert {e["tid"] for e in allreduces} == ({1} if overlap else {0})  # the communication thread when overlapping
    for phase in ("forward", "backward", "update"):
        assert sum(e["name"] == phase for e in events) == 6
