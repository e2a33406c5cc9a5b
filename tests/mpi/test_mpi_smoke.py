"""The MPI installation itself: ranks see each other and MPI's Allreduce works."""

import os

import numpy as np

# the world size as the launcher tells each process: MPICH's hydra (PMI), Open MPI's prterun
LAUNCHER_SIZE_VARIABLES = ("PMI_SIZE", "OMPI_COMM_WORLD_SIZE")


def test_world_allreduce(comm):
    p = comm.Get_size()
    x = np.full(4, comm.Get_rank(), dtype=np.float64)
    out = np.empty_like(x)
    comm.Allreduce(x, out)
    np.testing.assert_array_equal(out, np.full(4, p * (p - 1) / 2))


def test_every_process_the_launcher_started_is_in_the_world(comm):
    """mpi4py built against another MPI than the mpiexec that started it gives every process a world of its own:
    P copies of the suite at size 1, all passing. The launcher's count must be the world's (1 without a launcher)."""
    started = next((int(os.environ[v]) for v in LAUNCHER_SIZE_VARIABLES if os.environ.get(v, "").isdigit()), 1)
    assert comm.Get_size() == started, f"the launcher started {started} processes, MPI_COMM_WORLD has {comm.Get_size()}"
