"""Linear, Embedding, Dropout and Sequential against PyTorch on the same weights; state_dicts both ways."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from torch_reference import (  # noqa: E402
    assert_state_dicts_equal,
    compare_forward_backward,
    load_into_minidl,
    load_into_torch,
)

import minidl  # noqa: E402
from minidl import nn  # noqa: E402


@pytest.mark.parametrize("bias", [True, False])
def test_linear_parity(rng, bias):
    ours, theirs = nn.Linear(7, 5, bias=bias), torch.nn.Linear(7, 5, bias=bias)
    load_into_torch(theirs, ours)
    compare_forward_backward(ours, theirs, rng.standard_normal((3, 4, 7)).astype(np.float32))


def test_state_dict_round_trip_both_ways():
    for make_ours, make_theirs in [
        (lambda: nn.Linear(6, 4), lambda: torch.nn.Linear(6, 4)),
        (lambda: nn.Embedding(9, 3), lambda: torch.nn.Embedding(9, 3)),
        (
            lambda: nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2)),
            lambda: torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2)),
        ),
    ]:
        ours, theirs = make_ours(), make_theirs()
        load_into_minidl(ours, theirs)
        assert_state_dicts_equal(ours, theirs, rtol=0, atol=0)
        ours2, theirs2 = make_ours(), make_theirs()
        load_into_torch(theirs2, ours2)
        assert_state_dicts_equal(ours2, theirs2, rtol=0, atol=0)


def test_embedding_parity_repeated_indices(rng):
    ours, theirs = nn.Embedding(10, 4), torch.nn.Embedding(10, 4)
    load_into_minidl(ours, theirs)
    compare_forward_backward(ours, theirs, rng.integers(0, 10, size=(6, 5)))


def test_embedding_padding_idx_parity(rng):
    ours, theirs = nn.Embedding(10, 4, padding_idx=2), torch.nn.Embedding(10, 4, padding_idx=2)
    load_into_minidl(ours, theirs)
    compare_forward_backward(ours, theirs, np.array([[2, 3, 2], [1, 2, 9]]))


def test_sequential_mlp_parity(rng):
    ours = nn.Sequential(nn.Linear(5, 8), nn.ReLU(), nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 3), nn.Tanh())
    theirs = torch.nn.Sequential(
        torch.nn.Linear(5, 8),
        torch.nn.ReLU(),
        torch.nn.Linear(8, 8),
        torch.nn.Sigmoid(),
        torch.nn.Linear(8, 3),
        torch.nn.Tanh(),
    )
    load_into_torch(theirs, ours)
    compare_forward_backward(ours, theirs, rng.standard_normal((4, 5)).astype(np.float32))


def test_dropout_matches_torch_statistics_and_eval():
    """Masks differ by generator, so compare the law: kept values are x / (1 - p), about p are dropped."""
    x = np.ones((400, 100), np.float32)
    ours = nn.Dropout(0.4)(minidl.tensor(x)).data
    theirs = torch.nn.Dropout(0.4)(torch.from_numpy(x)).numpy()
    assert set(np.unique(ours)) == set(np.unique(theirs))
    assert abs((ours == 0).mean() - (theirs == 0).mean()) < 0.01
