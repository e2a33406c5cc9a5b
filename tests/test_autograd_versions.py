"""Version counters: backward refuses values written in place after an op saved them (minidl/saved.py)."""

import gc

import numpy as np
import pytest

import minidl
import minidl.nn as nn
from minidl import optim, saved

STALE = "modified in place after it was saved for backward"


def test_data_write_between_forward_and_backward_raises_naming_the_op():
    x = minidl.tensor([1.0, 2.0], requires_grad=True)
    w = minidl.tensor([3.0, 4.0], requires_grad=True)
    y = (x * w).sum()
    w.data[...] = 100
    with pytest.raises(RuntimeError, match=rf"input 1 \(shape \(2,\)\) of <Mul> was {STALE}"):
        y.backward()


@pytest.mark.parametrize(
    "write",
    [
        lambda w: w.data.__setitem__(0, 5.0),
        lambda w: w.data.__isub__(1.0),
        lambda w: np.add(w.data, 1.0, out=w.data),
        lambda w: w.data[0].__imul__(2.0),  # a view of the saved values
        lambda w: w.detach().data.__iadd__(1.0),  # another tensor on the same memory
    ],
    ids=["setitem", "isub", "ufunc-out", "view", "detached"],
)
def test_every_python_level_write_counts(write):
    w = minidl.tensor(np.array([[3.0, 4.0]]), requires_grad=True)
    y = (w * w).sum()
    write(w)
    with pytest.raises(RuntimeError, match=STALE):
        y.backward()


def test_view_saved_by_a_later_op_guards_the_original():
    """x @ w.T saves a view of w (the output of Transpose): writing w must still be seen."""
    x = minidl.tensor(np.ones((2, 3)))
    w = minidl.tensor(np.ones((4, 3)), requires_grad=True)
    y = (x @ w.T).sum()
    w.data -= 1.0
    with pytest.raises(RuntimeError, match=rf"<MatMul> was {STALE}"):
        y.backward()


def test_output_saved_by_its_op_is_guarded():
    x = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()  # Exp saves its output for backward
    y.data[0] = 0.0
    with pytest.raises(RuntimeError, match=rf"<Exp> was {STALE}"):
        y.sum().backward()


def test_optimizer_step_between_forward_and_backward_raises():
    model = nn.Linear(3, 2)
    opt = optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x = minidl.tensor(np.ones((4, 3), np.float32))
    model(x).sum().backward()  # gradients exist, so step() writes
    loss = model(x).sum()
    opt.step()
    with pytest.raises(RuntimeError, match=STALE):
        loss.backward()


@pytest.mark.parametrize("make_opt", [lambda p: optim.Adam(p, lr=0.01, weight_decay=0.1), optim.LARS])
def test_other_optimizers_are_seen_too(make_opt):
    model = nn.Linear(3, 2)
    opt = make_opt(model.parameters()) if not isinstance(make_opt, type) else make_opt(model.parameters(), lr=0.1)
    x = minidl.tensor(np.ones((4, 3), np.float32))
    model(x).sum().backward()
    loss = model(x).sum()
    opt.step()
    with pytest.raises(RuntimeError, match=STALE):
        loss.backward()


def test_ordinary_training_loop_is_unaffected_and_matches_plain_numpy():
    """forward, backward, step: the graph is freed before step, so .data is the plain array again."""
    model = nn.Linear(3, 2, dtype=np.float64)
    w0, b0 = model.weight.data.copy(), model.bias.data.copy()
    opt = optim.SGD(model.parameters(), lr=0.1)
    x = np.arange(12.0).reshape(4, 3) / 10
    for _ in range(3):
        opt.zero_grad()
        loss = (model(minidl.tensor(x)) ** 2).mean()
        loss.backward()
        assert type(model.weight.data) is np.ndarray
        opt.step()
    # the same three steps by hand: d mean(y^2)/dy = 2 y / y.size
    w, b = w0, b0
    for _ in range(3):
        y = x @ w.T + b
        gy = 2 * y / y.size
        w, b = w - 0.1 * gy.T @ x, b - 0.1 * gy.sum(0)
    np.testing.assert_allclose(model.weight.data, w, rtol=1e-12)
    np.testing.assert_allclose(model.bias.data, b, rtol=1e-12)


def test_writes_after_backward_or_without_graph_are_free():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    y.backward()
    w.data[...] = 7.0  # graph freed: nothing held
    with minidl.no_grad():
        z = (w * w).sum()  # nothing recorded
    w.data[...] = 8.0
    assert z.item() == 98.0 and type(w.data) is np.ndarray


def test_dropped_graph_releases_its_memory():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    assert saved.version_of(w.data) == 0 and isinstance(w.data, saved.SavedArray)
    del y
    gc.collect()
    assert saved.version_of(w.data) is None and type(w.data) is np.ndarray


def test_retained_graph_is_checked_on_its_second_backward():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    y.backward(retain_graph=True)
    w.data += 1.0  # allowed: raises only if the stale graph is used again
    with pytest.raises(RuntimeError, match=STALE):
        y.backward()


def test_other_writes_to_held_memory_fail_loudly():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with pytest.raises(ValueError, match="read-only"):
        np.copyto(w.data, 5.0)
    y.backward()
    np.testing.assert_array_equal(w.grad, [2.0, 4.0])


def test_saved_array_arithmetic_gives_plain_arrays():
    w = minidl.tensor(np.array([1.0, 2.0]), requires_grad=True)
    y = (w * w).sum()
    view = w.data
    for result in (view * 2, view + view, np.exp(view), view.sum(), view[::-1] - 1):
        assert not isinstance(result, saved.SavedArray) or not result.tracked
    fresh = np.empty_like(view)
    fresh[...] = 3.0  # a new array made from a view is not held memory
    t = minidl.Tensor(view)  # a tensor built on the view holds a plain array
    assert type(t._data) is np.ndarray
    y.backward()
    np.testing.assert_array_equal(w.grad, [2.0, 4.0])


def test_in_place_methods_bump_and_refuse_grad_mode():
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with pytest.raises(RuntimeError, match="requires grad is not supported outside no_grad"):
        w.add_(1.0)
    with minidl.no_grad():
        w.sub_(minidl.tensor([1.0, 1.0])).mul_(2.0)
    np.testing.assert_array_equal(w.data, [0.0, 2.0])
    with pytest.raises(RuntimeError, match=STALE):
        y.backward()
    c = minidl.zeros(3)
    c.fill_(2.0).div_(4.0)
    c.copy_(c.data + 1)
    np.testing.assert_array_equal(c.data, [1.5, 1.5, 1.5])
    assert c.zero_().data.sum() == 0


def test_rebinding_data_keeps_the_saved_values():
    """``t.data = new`` replaces the array; the graph kept the old one, so backward is still right."""
    w = minidl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * 3.0).sum() + (w * w).sum()
    w.data = np.array([5.0, 5.0])
    y.backward()
    np.testing.assert_array_equal(w.grad, [5.0, 7.0])
