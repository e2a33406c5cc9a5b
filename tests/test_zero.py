"""ZeRO stages 1-3 end where plain data parallelism (ring allreduce, one fusion bucket) ends, in float64.

Bitwise without clipping (the reduce-scatter is the ring allreduce's first half and the updates are
elementwise); to 1e-12 with clipping (the global norm is summed in another order). On the simulated
communicator for P = 1..5; tests/mpi/test_zero_mpi.py runs the same helper under mpiexec.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers.zero import OPTIMIZERS, Units, data, train

import collectives
import minidl
import minidl.distributed as dist
import minidl.nn.functional as F
from minidl import optim


@pytest.mark.parametrize("kind", sorted(OPTIMIZERS))
@pytest.mark.parametrize("p", [1, 2, 3, 5])
def test_every_stage_is_bitwise_plain_data_parallelism(p, kind):
    reference = collectives.simulate(p, train, kind, None)[0]
    for stage in (1, 2, 3):
        results = collectives.simulate(p, train, kind, stage)
        for rank, state in enumerate(results):
            for name, value in state.items():
                assert np.array_equal(value, reference[name]), f"stage {stage}, rank {rank}, {name}"


@pytest.mark.parametrize("stage", [1, 2, 3])
def test_clipping_by_the_global_norm_matches_to_1e12(stage):
    reference = collectives.simulate(4, train, "momentum", None, 0.05)[0]
    state = collectives.simulate(4, train, "momentum", stage, 0.05)[2]
    for name, value in state.items():
        np.testing.assert_allclose(value, reference[name], rtol=1e-12, atol=1e-14, err_msg=name)


def held(comm, stage: int) -> dict[str, int]:
    minidl.set_default_dtype(np.float64)
    dist.init(comm)
    model = Units()
    opt = dist.ZeroOptimizer(optim.Adam(model.parameters(), lr=1e-3), stage=stage, module=model)
    x, y = data(comm.Get_rank(), 0)
    F.cross_entropy(model(minidl.tensor(x)), y).backward()
    opt.step()
    return opt.memory_bytes()


def test_each_stage_shards_what_the_paper_says():
    params = list(Units().parameters())
    psi = sum(q.data.size for q in params) * 8  # bytes of float64 parameters
    p = 4
    shard = 8 * ((psi // 8 + len(params)) // p + 1)  # a shard of the packed gradients + presence flags
    one, two, three = (collectives.simulate(p, held, s)[0] for s in (1, 2, 3))
    # Adam: K = 2 values of state per parameter, sharded from stage 1 on (+ one shard of the step counters)
    assert 2 * psi / p <= one["optimizer_state"] <= 2 * shard + 64
    assert one["gradients"] >= psi  # stage 1 keeps the full gradient
    assert two["gradients"] <= shard  # stage 2 keeps only its shard's
    assert one["parameters"] >= psi and three["parameters"] <= shard


def test_refuses_layerwise_optimizers_and_bad_stages():
    model = Units()
    with pytest.raises(ValueError, match="not supported: ZeRO with LARS"):
        dist.ZeroOptimizer(
            optim.LARS(model.parameters(), lr=0.1), stage=1, comm=collectives.simulate(1, lambda c: c)[0]
        )
    with pytest.raises(ValueError, match="stage must be 1, 2 or 3"):
        dist.ZeroOptimizer(optim.SGD(model.parameters(), lr=0.1), stage=4)


def test_stage3_refuses_parameters_used_outside_the_units():
    def run(comm):
        minidl.set_default_dtype(np.float64)
        dist.init(comm)
        model = Units()
        opt = dist.ZeroOptimizer(optim.SGD(model.parameters(), lr=0.1), stage=3, module=model.a)  # a alone
        x, y = data(comm.Get_rank(), 0)
        F.cross_entropy(model(minidl.tensor(x)), y).backward()
        opt.step()

    with pytest.raises(RuntimeError, match="never gathered"):
        collectives.simulate(2, run)
