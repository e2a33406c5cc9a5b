"""The MPI installation itself: ranks see each other and MPI's Allreduce works."""

import numpy as np


def test_world_allreduce(comm):
    p = comm.Get_size()
    x = np.full(4, comm.Get_rank(), dtype=np.float64)
    out = np.empty_like(x)
    comm.Allreduce(x, out)
    np.testing.assert_array_equal(out, np.full(4, p * (p - 1) / 2))
