"""minidl.gradcheck: passes on correct backwards, catches wrong ones and says where."""

import numpy as np
import pytest

import minidl
from minidl import Function, GradcheckError, gradcheck, numerical_grad


class WrongSquare(Function):
    """x**2 with a backward that is wrong at one element (index 3 of the flattened input)."""

    def forward(self, a):
        self.save_for_backward(a)
        return a * a

    def backward(self, g):
        (a,) = self.saved_tensors
        grad = 2 * a * g
        grad.reshape(-1)[3] *= 1.5
        return grad


def test_passes_on_composite_expression(rng):
    x = rng.standard_normal((3, 4))
    w = rng.standard_normal((4, 2))
    assert gradcheck(lambda x, w: ((x @ w).tanh() * x.sum(axis=1, keepdims=True)).exp(), [x, w])


def test_non_scalar_output_and_multiple_outputs(rng):
    x = rng.standard_normal((2, 3))
    assert gradcheck(lambda x: (x * x, x.sigmoid()), [x])


def test_catches_wrong_backward_and_names_input_index_and_values(rng):
    x = minidl.tensor(rng.standard_normal((2, 3)), name="weights")
    y = rng.standard_normal((2, 3))
    with pytest.raises(GradcheckError) as info:
        gradcheck(lambda y, x: y + WrongSquare.apply(x), [y, x])
    err = info.value
    assert err.input_index == 1 and err.input_name == "weights" and err.index == (1, 0)
    assert err.analytic == pytest.approx(1.5 * err.numeric, rel=1e-6)
    msg = str(err)
    assert "weights" in msg and "input 1" in msg and "(1, 0)" in msg
    assert f"{err.analytic:.10g}" in msg and f"{err.numeric:.10g}" in msg


def test_is_an_assertion_error(rng):
    with pytest.raises(AssertionError):
        gradcheck(lambda x: WrongSquare.apply(x), [rng.standard_normal(5)])


def test_directional_check_catches_errors_in_large_inputs(rng):
    """Above max_elementwise only the random direction is checked; a 10% error must still show."""

    class Off(Function):
        def forward(self, a):
            return a * a

        def backward(self, g):
            return 2.2 * self.parents[0].data * g

    x = rng.standard_normal(5000)
    with pytest.raises(GradcheckError, match="along a random direction") as info:
        gradcheck(lambda x: Off.apply(x), [x], max_elementwise=100)
    assert info.value.index == "direction"
    assert gradcheck(lambda x: x * x, [x], max_elementwise=100)


def test_integer_inputs_are_constants(rng):
    x = rng.standard_normal((4, 3))
    idx = np.array([0, 2, 2, 3])
    assert gradcheck(lambda x, i, k: x[i] * k, [x, idx, 3])


def test_float32_inputs_are_checked_in_float64(rng):
    seen = []

    def fn(x):
        seen.append(x.dtype)
        return (x * 1.5).exp()

    gradcheck(fn, [rng.standard_normal(3).astype(np.float32)])
    assert set(seen) == {np.dtype(np.float64)}
    assert minidl.get_default_dtype() == np.float32  # restored


def test_wrt_restricts_checked_inputs(rng):
    x = rng.standard_normal(3)
    y = rng.standard_normal(3)
    # Only x is checked, so a wrong gradient for y goes unseen.
    assert gradcheck(lambda x, y: x * x + WrongSquare.apply(y), [x, y], wrt=[0])
    with pytest.raises(TypeError, match="non-float"):
        gradcheck(lambda x, i: x[i], [x, np.array([0])], wrt=[1])


def test_gradient_of_wrong_shape_is_reported(rng):
    class BadShape(Function):
        def forward(self, a):
            return a.sum(keepdims=True)

        def backward(self, g):
            return np.ones(1)

    with pytest.raises(RuntimeError, match=r"shape \(1,\) for an input of shape \(2, 2\)"):
        gradcheck(lambda x: BadShape.apply(x), [rng.standard_normal((2, 2))])


def test_unused_input_has_zero_gradient(rng):
    assert gradcheck(lambda x, y: x * 2.0, [rng.standard_normal(2), rng.standard_normal(2)])


def test_non_tensor_output_is_an_error(rng):
    with pytest.raises(TypeError, match="must return a Tensor"):
        gradcheck(lambda x: x.data, [rng.standard_normal(2)])


def test_numerical_grad_matches_formula(rng):
    x = rng.standard_normal((2, 3))
    (g,) = numerical_grad(lambda x: (x * x).sum(), [x])
    np.testing.assert_allclose(g, 2 * x, rtol=1e-7, atol=1e-8)
    gx, gi = numerical_grad(lambda x, i: x[i] * 3.0, [x, np.array([1, 1])], grad_output=np.ones((2, 3)))
    np.testing.assert_allclose(gx, np.array([[0, 0, 0], [6, 6, 6]]), atol=1e-7)
    assert gi is None


def test_strided_float64_inputs_keep_their_layout(rng):
    base = rng.standard_normal((6, 8))
    x = base[::2, ::3].T  # non-contiguous
    layouts = []

    def fn(t):
        layouts.append(t.data.flags.c_contiguous)
        return t.exp()

    assert gradcheck(fn, [x])
    assert layouts[1] is False  # the analytic pass (second call) sees the strided view
