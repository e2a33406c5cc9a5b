"""``python -m minidl.train lm|cnn --parallel data`` under mpiexec: P ranks with batch b take the same steps
as one process with batch P*b, only rank 0 prints, and a stopped run resumes exactly.

Run: mpiexec -n P python -m pytest -q -p no:cacheprovider tests/mpi/test_train_parallel.py
"""

from __future__ import annotations

import numpy as np
import pytest

from minidl.train import cnn, lm

# float64 and tiny models: the comparison with one process is to rounding, and each run takes a second.
LM_ARGS = [
    "--quick",
    "--dtype",
    "float64",
    "--hidden-size",
    "16",
    "--num-steps",
    "5",
    "--max-steps",
    "4",
    "--log-every",
    "2",
]
CNN_ARGS = [
    "--quick",
    "--dtype",
    "float64",
    "--width",
    "2",
    "--max-steps",
    "3",
    "--log-every",
    "3",
    "--eval-batch-size",
    "100",
]


def assert_close(a: dict[str, np.ndarray], b: dict[str, np.ndarray], rtol: float = 1e-8) -> None:
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], rtol=rtol, atol=1e-12, err_msg=k)


def assert_same_on_every_rank(comm, params: dict[str, np.ndarray]) -> None:
    for k, v in params.items():
        root = np.ascontiguousarray(v).copy()
        comm.Bcast(root, root=0)  # buffer-based, as everything on the wire (no pickle)
        np.testing.assert_array_equal(root, v, err_msg=k)


@pytest.mark.parametrize("algorithm", ["ring", "recursive_doubling", "mpi"])
def test_lm_data_parallel_equals_one_process_with_the_global_batch(comm, capsys, algorithm):
    P, rank = comm.Get_size(), comm.Get_rank()
    par = lm.main(
        LM_ARGS
        + [
            "--parallel",
            "data",
            "--allreduce",
            algorithm,
            "--batch-size",
            "3",
            "--eval-batch-size",
            "2",
            "--baseline-wps",
            "1000",
        ]
    )
    out = capsys.readouterr().out
    one = lm.main(LM_ARGS + ["--batch-size", str(3 * P), "--eval-batch-size", str(2 * P)])
    capsys.readouterr()
    assert_same_on_every_rank(comm, par["params"])
    assert_close(par["params"], one["params"])
    assert par["test_ppl"] == pytest.approx(one["test_ppl"], rel=1e-10)
    if rank == 0:
        for text in ("words/s", "/rank", "efficiency", "ms/step", "comm", "wait", "test perplexity", f"{P} ranks"):
            assert text in out, text
    else:
        assert out == ""


def test_lm_data_parallel_resumes_exactly(comm, tmp_path, capsys):
    """Dropout (a different stream per rank) and each rank's own LSTM state survive the checkpoint."""
    args = [
        "--quick",
        "--parallel",
        "data",
        "--hidden-size",
        "16",
        "--num-steps",
        "5",
        "--batch-size",
        "4",
        "--dropout",
        "0.2",
        "--log-every",
        "100",
    ]
    path = str(tmp_path / "lm.npz")  # only rank 0's path is used: rank 0 writes and reads, then sends
    lm.main(args + ["--max-steps", "5", "--save", path])
    resumed = lm.main(args + ["--max-steps", "9", "--resume", path])
    straight = lm.main(args + ["--max-steps", "9"])
    capsys.readouterr()
    for k in straight["params"]:
        np.testing.assert_array_equal(resumed["params"][k], straight["params"][k], err_msg=k)


def test_cnn_sync_bn_equals_one_process_with_the_global_batch(comm, capsys):
    """With SyncBatchNorm the batch statistics are the global batch's, so even a ResNet matches one process."""
    P = comm.Get_size()
    par = cnn.main(CNN_ARGS + ["--parallel", "data", "--sync-bn", "--batch-size", "4", "--allreduce", "tree"])
    out = capsys.readouterr().out
    one = cnn.main(CNN_ARGS + ["--batch-size", str(4 * P)])
    capsys.readouterr()
    assert_same_on_every_rank(comm, par["params"])
    assert_close(par["params"], one["params"], rtol=1e-7)
    assert par["accuracy"] == one["accuracy"]
    if comm.Get_rank() == 0:
        assert "images/s" in out and "SyncBatchNorm" in out


def test_cnn_per_rank_batchnorm_and_fp16_keep_replicas_identical(comm, capsys):
    """Per-rank batch norm and fp16 gradients differ from one process, but the replicas stay in step."""
    par = cnn.main(
        [
            "--quick",
            "--width",
            "2",
            "--max-steps",
            "3",
            "--parallel",
            "data",
            "--batch-size",
            "4",
            "--compression",
            "fp16",
            "--fusion-mb",
            "0.001",
        ]
    )
    capsys.readouterr()
    assert_same_on_every_rank(comm, {k: v for k, v in par["params"].items() if "running" not in k})


def test_log_json_from_rank_0_with_the_step_split(comm, tmp_path, capsys):
    """--log-json under --parallel data: rank 0 writes one record per progress line, with the compute / wait /
    communication seconds per step the DistributedOptimizer measured, and one per evaluation; no other rank writes."""
    import json

    path = tmp_path / f"log-{comm.Get_rank()}.jsonl"  # each rank's own name: only rank 0's may exist
    lm.main(LM_ARGS + ["--parallel", "data", "--batch-size", "3", "--log-json", str(path)])
    capsys.readouterr()
    if comm.Get_rank() != 0:
        assert not path.exists()
        return
    records = [json.loads(line) for line in path.read_text().splitlines()]
    train = [r for r in records if r["kind"] == "train"]
    assert [r["step"] for r in train] == [2, 4] and records[-1]["kind"] == "eval" and records[-1]["split"] == "test"
    for r in train:
        assert r["comp_s"] > 0 and r["comm_s"] > 0 and r["wait_s"] >= 0 and r["words_per_s"] > 0
