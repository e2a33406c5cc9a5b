"""python -m collectives.virtual_time.calibrate under mpiexec: every rank gets the same numbers, rank 0's JSON loads back."""

import os

import numpy as np

from collectives import cost
from collectives.virtual_time import calibrate


def test_calibrate_saves_what_it_measured(comm, tmp_path):
    out = os.path.join(tmp_path, "calibration.json")
    params = calibrate.main(["--out", out, "--large", "256K", "--repeats", "3"], comm)
    everyone = np.empty((comm.Get_size(), 3))
    comm.Allgather(params.as_array(), everyone)
    assert (everyone == everyone[0]).all()
    if comm.Get_rank() == 0:
        assert cost.load_params(out) == params
    else:
        assert not os.path.exists(out)
