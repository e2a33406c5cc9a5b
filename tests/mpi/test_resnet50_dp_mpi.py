"""``python -m minidl.train cnn --model resnet50 --parallel data --sync-bn`` under mpiexec: P ranks with batch b
take the same steps as one process with batch P*b (float64, 32 px, two steps).

Run: mpiexec -n 2 python -m pytest -q -p no:cacheprovider tests/mpi/test_resnet50_dp_mpi.py
"""

from __future__ import annotations

import numpy as np
import pytest

from minidl.train import cnn

ARGS = ["--model", "resnet50", "--quick", "--dtype", "float64", "--max-steps", "2", "--eval-batch-size", "64"]


def test_resnet50_sync_bn_equals_one_process(comm, capsys):
    P = comm.Get_size()
    if P != 2:  # 75-100 s a size on 2 loaded cores: SyncBatchNorm at every P is tests/mpi's CIFAR ResNet's to hold
        pytest.skip("ResNet-50's exactness is checked at -n 2 (the step's cost; other P: the CIFAR ResNet tests)")
    par = cnn.main(ARGS + ["--parallel", "data", "--sync-bn", "--batch-size", "2"])
    out = capsys.readouterr().out
    one = cnn.main(ARGS + ["--batch-size", str(2 * P)])
    capsys.readouterr()
    assert len(par["params"]) == 320  # torchvision's ResNet-50 state_dict: running statistics compared too
    for k in one["params"]:
        np.testing.assert_allclose(par["params"][k], one["params"][k], rtol=1e-7, atol=1e-10, err_msg=k)
        root = np.ascontiguousarray(par["params"][k]).copy()
        comm.Bcast(root, root=0)  # the replicas are identical
        np.testing.assert_array_equal(root, par["params"][k], err_msg=k)
    assert par["accuracy"] == one["accuracy"]
    if comm.Get_rank() == 0:
        assert "ResNet-50 (torchvision)" in out and "SyncBatchNorm" in out
