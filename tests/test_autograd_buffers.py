"""The engine's two buffer shortcuts: adopting a fresh gradient as .grad (Function.fresh_grads), and a backward
overwriting its saved values on their last use (Function.last_use). Each must give the gradients of the plain path."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.autograd import accumulate_grad
from minidl.ops.loss import CrossEntropy


def _leaf(a):
    return minidl.tensor(np.asarray(a, np.float64), requires_grad=True)


def test_fresh_weight_gradient_is_adopted_and_accumulates_right():
    rng = np.random.default_rng(0)
    x, w, b = rng.standard_normal((5, 3)), rng.standard_normal((4, 3)), rng.standard_normal(4)
    xt, wt, bt = _leaf(x), _leaf(w), _leaf(b)
    y = nn.functional.linear(xt, wt, bt)
    y.backward(np.ones((5, 4)), retain_graph=True)
    first = wt.grad
    np.testing.assert_allclose(first, np.ones((5, 4)).T @ x)
    np.testing.assert_allclose(bt.grad, np.full(4, 5.0))
    y.backward(np.ones((5, 4)))  # a second gradient is added in place into the adopted buffer
    assert wt.grad is first
    np.testing.assert_allclose(wt.grad, 2 * np.ones((5, 4)).T @ x)


def test_weight_used_twice_gets_the_sum():
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((5, 3)), rng.standard_normal((4, 3))
    xt, wt = _leaf(x), _leaf(w)
    (nn.functional.linear(xt, wt) + nn.functional.linear(2 * xt, wt)).sum().backward()
    np.testing.assert_allclose(wt.grad, np.ones((4, 5)) @ (3 * x))
    np.testing.assert_allclose(xt.grad, 3 * np.ones((5, 4)) @ w)


def test_accumulate_grad_copies_what_it_does_not_own():
    t = _leaf(np.zeros((2, 3)))
    g = np.ones((2, 3))
    accumulate_grad(t, g)
    assert t.grad is not g and np.shares_memory(t.grad, g) is False
    t2 = _leaf(np.zeros((2, 3)))
    row = np.ones(3)
    accumulate_grad(t2, row, owned=True)  # broadcast: a read-only view, never adopted
    t2.grad += 1
    np.testing.assert_array_equal(row, np.ones(3))
    t3 = _leaf(np.zeros((3, 2)))
    base = np.ones((2, 3))
    accumulate_grad(t3, base.T, owned=True)  # a view (not contiguous): copied
    assert not np.shares_memory(t3.grad, base)
    t4 = _leaf(np.zeros((2, 3)))
    fresh = np.ones((2, 3))
    accumulate_grad(t4, fresh, owned=True)
    assert t4.grad is fresh


@pytest.mark.parametrize("soft", [False, True])
def test_cross_entropy_backward_twice_with_retained_graph(soft):
    rng = np.random.default_rng(2)
    logits = _leaf(rng.standard_normal((6, 5)))
    target = rng.dirichlet(np.ones(5), 6) if soft else rng.integers(0, 5, 6)
    loss = F.cross_entropy(logits, target)
    loss.backward(retain_graph=True)
    once = logits.grad.copy()
    loss.backward()  # the first backward must not have overwritten the saved exp(x - m)
    np.testing.assert_allclose(logits.grad, 2 * once, rtol=1e-12)
    p = np.exp(logits.data - logits.data.max(1, keepdims=True))
    p /= p.sum(1, keepdims=True)
    q = target if soft else np.eye(5)[target]
    np.testing.assert_allclose(once, (p - q) / 6, rtol=1e-10, atol=1e-14)


def test_cross_entropy_direct_backward_calls_do_not_consume():
    rng = np.random.default_rng(3)
    x, t = rng.standard_normal((4, 7)), rng.integers(0, 7, 4)
    fn = CrossEntropy()
    fn.forward(x, t)
    g1, _ = fn.backward(np.array(1.0))
    g2, _ = fn.backward(np.array(1.0))  # last_use is False outside the engine: the saved values are intact
    np.testing.assert_array_equal(g1, g2)
    assert not np.shares_memory(g1, g2)


def test_last_use_is_reset_when_a_backward_raises():
    """Sweep.before tells a Function its saved values are on their last use; a backward that raises must not
    leave that flag set, or a later direct call would overwrite values still needed."""

    class Fails(minidl.Function):
        def forward(self, x):
            return x * 2.0

        def backward(self, g):
            raise ValueError("boom")

    y = Fails.apply(_leaf(np.ones(3)))
    fn = y._ctx
    with pytest.raises(ValueError, match="boom"):
        y.sum().backward()
    assert fn.last_use is False


def test_the_chain_rule_call_stands_in_the_backward_loop():
    """docs/core.md's first stop: the loop of autograd.backward calls each Function's backward itself (micrograd's
    shape), with Sweep's before/after around it, so a reader sees the chain rule in the loop."""
    import inspect

    from minidl import autograd

    loop = inspect.getsource(autograd.backward)
    call, before, after = (loop.index(s) for s in ("fn.backward(*out_grads)", "sweep.before(", "sweep.after("))
    assert before < call < after
