"""The tape: topological order, accumulation, retain_grad, freed graphs, error messages."""

import numpy as np
import pytest

import minidl


def test_long_chain_has_no_recursion_limit():
    x = minidl.tensor([1.0], requires_grad=True, dtype=np.float64)
    y = x
    for _ in range(100_000):
        y = y * 1.0
    y.sum().backward()
    assert x.grad[0] == 1.0


def test_reused_tensor_accumulates():
    x = minidl.tensor([3.0], requires_grad=True, dtype=np.float64)
    y = x * x + x  # d/dx = 2x + 1
    y.sum().backward()
    assert x.grad[0] == pytest.approx(7.0)


def test_diamond_graph_runs_each_backward_once():
    x = minidl.tensor(2.0, requires_grad=True, dtype=np.float64)
    a = x * 3.0
    b = a.exp() + a.tanh() + a  # a is used three times
    b.backward()
    a0 = 6.0
    assert x.grad == pytest.approx(3.0 * (np.exp(a0) + 1 - np.tanh(a0) ** 2 + 1))


def test_non_leaf_grad_not_kept_unless_retained():
    x = minidl.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    k = (x * 3.0).retain_grad()
    (h * k).sum().backward()
    assert h.grad is None
    np.testing.assert_allclose(k.grad, h.data)


def test_second_backward_through_freed_graph_raises():
    x = minidl.tensor([1.0], requires_grad=True)
    y = (x.exp() * 2.0).sum()
    y.backward()
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()


def test_retain_graph_allows_second_backward():
    x = minidl.tensor([1.0], requires_grad=True, dtype=np.float64)
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    assert x.grad[0] == pytest.approx(4.0)


def test_backward_on_non_scalar_needs_grad():
    x = minidl.tensor(np.ones((2, 3)), requires_grad=True)
    with pytest.raises(RuntimeError, match=r"scalar output.*\(2, 3\)"):
        (x * 2.0).backward()


def test_integer_tensors_cannot_require_grad():
    with pytest.raises(TypeError, match="floating"):
        minidl.tensor([1, 2, 3], requires_grad=True)


def test_no_grad_records_nothing():
    x = minidl.tensor([1.0], requires_grad=True)
    with minidl.no_grad():
        y = x * 2.0
    assert not y.requires_grad and y.is_leaf


def test_default_dtype():
    assert minidl.tensor([1.0]).dtype == np.float32
    minidl.set_default_dtype(np.float64)
    assert minidl.tensor([1.0]).dtype == np.float64
    assert minidl.tensor(np.ones(2, np.float32)).dtype == np.float32  # an ndarray keeps its dtype


def test_python_scalar_keeps_tensor_dtype():
    x = minidl.tensor(np.ones(2, np.float32))
    assert (x * 2).dtype == np.float32 and (2.0 - x).dtype == np.float32


def test_matmul_shape_error_names_both_shapes():
    a = minidl.tensor(np.ones((2, 3)))
    b = minidl.tensor(np.ones((4, 5)))
    with pytest.raises(ValueError, match=r"matmul.*\(2, 3\).*\(4, 5\)"):
        a @ b


def test_broadcast_error_names_op_and_shapes():
    a = minidl.tensor(np.ones((2, 3)))
    b = minidl.tensor(np.ones((4,)))
    with pytest.raises(ValueError, match=r"add.*\(2, 3\).*\(4,\)"):
        a + b


def test_no_grad_is_per_thread():
    """Simulated ranks are threads: one thread's no_grad must not stop another from recording."""
    import threading

    inside, recorded = threading.Event(), {}
    release = threading.Event()

    def hold_no_grad():
        with minidl.no_grad():
            inside.set()
            release.wait(5)

    t = threading.Thread(target=hold_no_grad)
    t.start()
    inside.wait(5)
    x = minidl.tensor([1.0], requires_grad=True)
    recorded["y"] = (x * 2.0).requires_grad
    release.set()
    t.join()
    assert recorded["y"]
