"""Hypothesis strategies shared by the op tests: shapes (size-0 and size-1 axes included), broadcasting
pairs, and arrays in several memory layouts (contiguous, transposed, strided, reversed) holding the same
values, so every op is checked on non-contiguous inputs too.

Values come from a seeded normal generator rather than from hypothesis' float strategy: ties and points
exactly at a kink (relu/abs at 0, equal maxima) then have probability zero, which the finite differences of
gradcheck need; the tests of tie rules build their ties on purpose.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

LAYOUTS = ("contiguous", "transposed", "strided", "reversed")


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 0, max_side: int = 3):
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side, max_side=max_side)


def with_layout(values: np.ndarray, layout: str) -> np.ndarray:
    """An array equal to ``values`` whose memory layout is ``layout``."""
    if values.ndim == 0 or layout == "contiguous":
        return values
    if layout == "transposed":  # Fortran order: the transpose of a C-contiguous array
        return np.ascontiguousarray(values.T).T
    if layout == "strided":  # every other element of a buffer twice as long in the last axis
        buf = np.zeros(values.shape[:-1] + (2 * values.shape[-1],), values.dtype)
        buf[..., ::2] = values
        return buf[..., ::2]
    if layout == "reversed":  # negative stride along axis 0
        return np.ascontiguousarray(values[::-1])[::-1]
    raise ValueError(layout)


@st.composite
def arrays(draw, shape=None, dtype=np.float64, positive: bool = False, away_from_zero: bool = False, **shape_kw):
    """A float array of the given (or a drawn) shape, normal values, in a drawn layout.

    positive: values in [0.5, ...) (for log, pow bases); away_from_zero: |values| >= 0.5 (for division).
    """
    if shape is None:
        shape = draw(shapes(**shape_kw))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    values = rng.standard_normal(shape)
    if positive:
        values = 0.5 + np.abs(values)
    elif away_from_zero:
        values = np.sign(values + (values == 0)) * (0.5 + np.abs(values))
    return with_layout(np.asarray(values, dtype), draw(st.sampled_from(LAYOUTS)))


@st.composite
def broadcast_pair(draw, max_dims: int = 3, max_side: int = 3, min_side: int = 0, **array_kw):
    """Two arrays whose shapes broadcast together (possibly to a size-0 result)."""
    bs = draw(hnp.mutually_broadcastable_shapes(num_shapes=2, max_dims=max_dims, max_side=max_side, min_side=min_side))
    a_shape, b_shape = bs.input_shapes
    return draw(arrays(shape=a_shape)), draw(arrays(shape=b_shape, **array_kw))


def axis_args(ndim: int):
    """None, one axis (negative ones too) or a tuple of distinct axes, for an ndim-dimensional array."""
    if ndim == 0:
        return st.just(None)
    one = st.integers(-ndim, ndim - 1)
    many = st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True).map(tuple)
    return st.one_of(st.none(), one, many)


def check_op(fn, reference, inputs, rtol: float = 1e-10, atol: float = 1e-12, **gradcheck_kw) -> None:
    """fn on Tensors equals reference on the ndarrays, keeps the inputs' shapes/layouts intact, and passes
    gradcheck (float64)."""
    import minidl

    before = [x.copy() for x in inputs if isinstance(x, np.ndarray)]
    out = fn(*[minidl.Tensor(x) if isinstance(x, np.ndarray) and x.dtype.kind == "f" else x for x in inputs])
    outs = out if isinstance(out, tuple) else (out,)
    expected = reference(*inputs)
    expected = expected if isinstance(expected, tuple | list) else (expected,)
    assert len(outs) == len(expected)
    for o, e in zip(outs, expected):
        assert o.shape == np.shape(e), (o.shape, np.shape(e))
        np.testing.assert_allclose(o.data, e, rtol=rtol, atol=atol)
    for x, b in zip([x for x in inputs if isinstance(x, np.ndarray)], before):
        np.testing.assert_array_equal(x, b)  # ops never write into their inputs
    assert minidl.gradcheck(fn, inputs, **gradcheck_kw)
