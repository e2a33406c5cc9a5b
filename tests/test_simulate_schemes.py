"""minidl.simulate beyond the dense allreduce: sparse rows, stragglers and jitter, the other parallel schemes.

Each against a closed form on the crossbar (every message alpha + n beta, no contention)."""

from __future__ import annotations

import pytest

from collectives import cost
from collectives.cost import CostParams
from minidl.simulate import BucketProfile, Cluster, TaskOptions, profile_task
from minidl.simulate.cli import main

C = CostParams(alpha=10e-6, beta=1e-9, gamma=2e-10)


def ring_allgather(p: int, nbytes: float) -> float:
    return (p - 1) * (C.alpha + nbytes * C.beta)


@pytest.mark.parametrize("p", [2, 4, 16])
def test_rows_exchange_is_three_allgathers_or_the_dense_allreduce(p):
    """sparse_rows.exchange_rows: counts (with their check), ids, rows, the adds; dense when K = p k > V / 2."""
    V, k, row = 1000, 30, 800
    bucket = BucketProfile(V * row, 0.0, rows=k, row_bytes=row)
    cluster = Cluster(p, "crossbar", params=C)
    counts = ring_allgather(p, 16) + cost.predict("recursive_doubling", p, 112, C)
    if p * k <= V / 2:
        want = counts + ring_allgather(p, 8 * k) + ring_allgather(p, k * row) + p * k * row * C.gamma
    else:
        want = counts + cost.predict("ring", p, V * row, C)
    assert cluster.exchange_s("ring", bucket) == pytest.approx(want, rel=1e-9)
    dense = BucketProfile(V * row, 0.0)
    assert cluster.exchange_s("ring", dense) == pytest.approx(cost.predict("ring", p, V * row, C), rel=1e-9)


def test_sparse_embedding_profile_has_a_rows_bucket():
    prof = profile_task("lm", TaskOptions(sparse_embedding=True, steps=1, batch_size=2, num_steps=3))
    (rows,) = [b for b in prof.buckets if b.rows]
    assert rows.row_bytes == 200 * 4 and 1 <= rows.rows <= 6  # the demo's 200 floats a row; 6 words looked up
    with pytest.raises(ValueError, match="only to the language model"):
        profile_task("cnn", TaskOptions(sparse_embedding=True))


def test_cli_sparse_embedding_flag(capsys):
    assert main(["cnn", "--sparse-embedding", "--nodes", "1,2", "--profile-steps", "1"]) == 2
    assert "only to the language model" in capsys.readouterr().err
    assert main(["lm", "--sparse-embedding", "--profile", "params=1e6,rate=100,batch=4"]) == 2
    assert "--sparse-embedding" in capsys.readouterr().err
