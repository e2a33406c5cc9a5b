"""Under mpiexec -n P: layer-wise model parallelism trains exactly as one process (float64, 1e-8).

Every rank also trains the dense model itself (tiny), so rank 0 compares the gathered stages with it.
The scenarios are the serial tests' (tests/test_model_parallel.py), run on MPI.COMM_WORLD.
"""

import pytest
from helpers.model_parallel import (
    assert_same_state,
    make_mlp,
    mlp_batches,
    train_lm,
    train_lm_dense,
    train_sequential,
    train_sequential_dense,
)

from minidl.distributed.model_parallel import layerwise as mp

pytestmark = pytest.mark.usefixtures("float64")  # exactness is checked in float64


def test_split_sequential_equals_one_process(comm):
    state, _ = train_sequential(comm)
    if comm.Get_rank() == 0:
        assert_same_state(state, train_sequential_dense())
    else:
        assert state is None


def test_split_sequential_balanced_by_parameters(comm):
    state, _ = train_sequential(comm, balance="parameters")
    if comm.Get_rank() == 0:
        assert_same_state(state, train_sequential_dense())


def test_split_lm_equals_one_process(comm):
    layers = max(2, comm.Get_size() - 2)  # P <= L + 2 units (embedding, L LSTM layers, decoder)
    state, _ = train_lm(comm, layers)
    if comm.Get_rank() == 0:
        assert_same_state(state, train_lm_dense(layers))


def test_bytes_on_the_wire_are_activations_and_gradients(comm):
    """Rank r sends its output activation (+ header) forward and dL/d(input) back: nothing else."""
    rank, P = comm.Get_rank(), comm.Get_size()
    _, sent = train_sequential(comm, steps=1)
    layers = list(make_mlp())
    ranges = mp.stage_ranges(len(layers), P, None)
    batch = mlp_batches(1)[0][0].shape[0]

    def width_after(i):
        return next(m.out_features for m in reversed(layers[: i + 1]) if hasattr(m, "out_features"))

    forward = mp.HEADER_BYTES + batch * width_after(ranges[rank][-1]) * 8 if rank < P - 1 else 0
    backward = batch * width_after(ranges[rank - 1][-1]) * 8 if rank > 0 else 0
    assert sent == forward + backward
