"""Embedding.from_pretrained (freeze, padding_idx) and the options that are not supported, against PyTorch."""

import numpy as np
import pytest

import minidl
from minidl import nn, optim


def test_from_pretrained_copies_and_freezes(rng):
    w = rng.standard_normal((5, 3))
    emb = nn.Embedding.from_pretrained(w)
    w[0, 0] = 99.0  # a copy: later changes to the source do not reach the layer
    assert emb.weight.data[0, 0] != 99.0 and emb.weight.dtype == np.float64
    assert not emb.weight.requires_grad
    out = emb(np.array([[1, 2], [4, 1]]))
    np.testing.assert_array_equal(out.data, emb.weight.data[[[1, 2], [4, 1]]])
    assert not out.requires_grad
    opt = optim.SGD(emb.parameters(), lr=1.0)
    before = emb.weight.data.copy()
    opt.step()  # no gradient: the frozen table stays
    np.testing.assert_array_equal(emb.weight.data, before)


def test_from_pretrained_trainable_with_padding_row(rng):
    w = rng.standard_normal((4, 2)).astype(np.float32)
    emb = nn.Embedding.from_pretrained(minidl.tensor(w), freeze=False, padding_idx=1)
    np.testing.assert_array_equal(emb.weight.data[1], w[1])  # the padding row is kept as given, as PyTorch
    emb(np.array([1, 2, 1])).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad, [[0, 0], [0, 0], [1, 1], [0, 0]])  # none for padding_idx


def test_unsupported_options_say_so():
    with pytest.raises(NotImplementedError, match="not supported: max_norm=1.0"):
        nn.Embedding(4, 2, max_norm=1.0)
    with pytest.raises(NotImplementedError, match="not supported: scale_grad_by_freq=True"):
        nn.Embedding(4, 2, scale_grad_by_freq=True)
    with pytest.raises(ValueError, match="2-D float array"):
        nn.Embedding.from_pretrained(np.zeros(3))


def test_sparse_marks_the_weight_and_keeps_a_dense_gradient(rng):
    """sparse=True changes only how data parallelism exchanges the gradient (tests/mpi/test_sparse_rows.py)."""
    w = rng.standard_normal((6, 3))
    dense, sparse = nn.Embedding.from_pretrained(w, freeze=False), nn.Embedding.from_pretrained(w, False, sparse=True)
    assert sparse.weight.sparse_grad and not dense.weight.sparse_grad and "sparse=True" in repr(sparse)
    for emb in (dense, sparse):
        (emb(np.array([[1, 4], [4, 0]])) ** 2).sum().backward()
    assert type(sparse.weight.grad) is np.ndarray and sparse.weight.grad.shape == (6, 3)
    np.testing.assert_array_equal(sparse.weight.grad, dense.weight.grad)


def test_from_pretrained_matches_torch(rng):
    torch = pytest.importorskip("torch")
    w = rng.standard_normal((6, 3))
    ours = nn.Embedding.from_pretrained(w, freeze=False, padding_idx=2)
    theirs = torch.nn.Embedding.from_pretrained(torch.tensor(w), freeze=False, padding_idx=2)
    idx = np.array([[0, 2, 5], [2, 2, 1]])
    a, b = ours(idx), theirs(torch.tensor(idx))
    np.testing.assert_array_equal(a.data, b.detach().numpy())
    g = rng.standard_normal(a.shape)
    a.backward(g)
    b.backward(torch.tensor(g))
    np.testing.assert_allclose(ours.weight.grad, theirs.weight.grad.numpy(), rtol=1e-14)
    assert list(ours.state_dict()) == list(theirs.state_dict())
    frozen = torch.nn.Embedding.from_pretrained(torch.tensor(w))
    assert nn.Embedding.from_pretrained(w).weight.requires_grad == frozen.weight.requires_grad
