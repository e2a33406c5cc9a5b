"""Shape ops and indexing: forward equals NumPy, gradcheck passes, errors name shapes."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp
from ops_strategies import arrays, check_op, shapes

import minidl


@given(data=st.data())
def test_reshape_and_flatten(data):
    x = data.draw(arrays(min_side=1))
    new = data.draw(st.sampled_from([(-1,), (x.size,), (1, x.size), (x.size, 1, 1)]))
    check_op(lambda t: t.reshape(new), lambda a: a.reshape(new), [x])
    check_op(lambda t: t.flatten(), lambda a: a.reshape(-1), [x])
    if x.ndim >= 2:
        check_op(lambda t: t.flatten(1), lambda a: a.reshape(a.shape[0], -1), [x])


@given(data=st.data())
def test_transpose_permute(data):
    x = data.draw(arrays())
    perm = data.draw(st.permutations(range(x.ndim)))
    check_op(lambda t: t.transpose(*perm), lambda a: a.transpose(perm), [x])
    check_op(lambda t: t.T, lambda a: a.T, [x])


@given(data=st.data())
def test_squeeze_unsqueeze(data):
    x = data.draw(arrays(max_side=2))
    axis = data.draw(st.integers(-x.ndim - 1, x.ndim))
    check_op(lambda t: t.unsqueeze(axis), lambda a: np.expand_dims(a, axis), [x])
    check_op(lambda t: t.squeeze(), lambda a: np.squeeze(a), [x])


@given(data=st.data())
def test_expand_broadcast_to(data):
    shape = data.draw(shapes(max_dims=3))
    target = data.draw(
        hnp.broadcastable_shapes(shape, min_dims=len(shape), max_dims=4, min_side=0, max_side=3).map(
            lambda s: np.broadcast_shapes(s, shape)
        )
    )
    x = data.draw(arrays(shape=shape))
    check_op(lambda t: t.expand(*target), lambda a: np.broadcast_to(a, target), [x])
    check_op(lambda t: minidl.broadcast_to(t, target), lambda a: np.broadcast_to(a, target), [x])


def test_expand_minus_one_keeps_size():
    x = minidl.tensor(np.ones((3, 1)))
    assert x.expand(2, -1, 4).shape == (2, 3, 4)


@given(data=st.data())
def test_basic_slicing(data):
    x = data.draw(arrays(min_dims=1))
    index = data.draw(hnp.basic_indices(x.shape, allow_newaxis=True, allow_ellipsis=True))
    check_op(lambda t: t[index], lambda a: a[index], [x])


@given(data=st.data())
def test_integer_array_indexing_with_repeats(data):
    x = data.draw(arrays(min_dims=1, min_side=1))
    n = x.shape[0]
    idx = np.array(data.draw(st.lists(st.integers(-n, n - 1), min_size=0, max_size=6)), dtype=np.int64)
    check_op(lambda t: t[idx], lambda a: a[idx], [x])
    if x.ndim >= 2:  # a mixed index: integer array on axis 0, slice on axis 1
        check_op(lambda t: t[idx, ::-1], lambda a: a[idx, ::-1], [x])


@given(data=st.data())
def test_boolean_mask_indexing(data):
    x = data.draw(arrays(min_dims=1))
    mask = data.draw(hnp.arrays(bool, x.shape))
    check_op(lambda t: t[mask], lambda a: a[mask], [x])
    check_op(lambda t: t[minidl.tensor(mask)], lambda a: a[mask], [x])  # a Tensor mask works too


def test_repeated_indices_accumulate():
    x = minidl.tensor(np.arange(4.0), requires_grad=True)
    (x[[0, 0, 3, 0]] * minidl.tensor([1.0, 2.0, 3.0, 4.0])).sum().backward()
    np.testing.assert_array_equal(x.grad, [7.0, 0.0, 0.0, 3.0])


@given(data=st.data())
def test_concatenate_stack_split(data):
    base = list(data.draw(shapes(min_dims=1, max_dims=3)))
    axis = data.draw(st.integers(-len(base), len(base) - 1))
    sizes = data.draw(st.lists(st.integers(0, 3), min_size=1, max_size=3))
    parts = []
    for n in sizes:
        shape = list(base)
        shape[axis] = n
        parts.append(data.draw(arrays(shape=tuple(shape))))
    check_op(lambda *ts: minidl.concatenate(ts, axis=axis), lambda *a: np.concatenate(a, axis=axis), parts)
    check_op(lambda *ts: minidl.cat(list(ts), axis), lambda *a: np.concatenate(a, axis=axis), parts)
    same = [data.draw(arrays(shape=tuple(base))) for _ in sizes]
    stack_axis = data.draw(st.integers(-len(base) - 1, len(base)))
    check_op(lambda *ts: minidl.stack(ts, axis=stack_axis), lambda *a: np.stack(a, axis=stack_axis), same)
    whole = np.concatenate(parts, axis=axis)
    cuts = list(np.cumsum(sizes)[:-1])
    check_op(lambda t: minidl.split(t, cuts, axis=axis), lambda a: tuple(np.split(a, cuts, axis=axis)), [whole])
    # Equal sections, and using only some of the parts (the others get zero gradient).
    k = len(sizes)
    if whole.shape[axis] % k == 0:
        check_op(lambda t: t.split(k, axis)[0], lambda a: np.split(a, k, axis=axis)[0], [whole])


@given(data=st.data())
def test_pad(data):
    x = data.draw(arrays(min_dims=1, max_dims=3))  # np.pad rejects 0-d arrays
    widths = data.draw(
        st.one_of(
            st.integers(0, 2),
            st.tuples(st.integers(0, 2), st.integers(0, 2)),
            st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2)), min_size=x.ndim, max_size=x.ndim).map(tuple),
        )
    )
    value = data.draw(st.sampled_from([0.0, -1.5]))
    check_op(lambda t: minidl.pad(t, widths, value), lambda a: np.pad(a, widths, constant_values=value), [x])


def test_split_chain_pad_concatenate_gradient():
    x = np.random.default_rng(0).standard_normal((4, 6))

    def fn(t):
        a, b, c = t.split(3, axis=1)
        return minidl.concatenate([minidl.pad(c, ((0, 0), (1, 0))), a * b], axis=1).tanh()

    assert minidl.gradcheck(fn, [x])


def test_shape_errors_name_op_and_shapes():
    a = minidl.tensor(np.ones((2, 3)))
    with pytest.raises(ValueError, match=r"concatenate: shapes \(2, 3\) and \(4, 5\) differ outside axis 0"):
        minidl.concatenate([a, np.ones((4, 5))])
    with pytest.raises(ValueError, match=r"concatenate: shapes \(2, 3\) and \(2,\) differ"):
        minidl.concatenate([a, np.ones(2)])
    with pytest.raises(ValueError, match=r"stack: shapes \(2, 3\) and \(3, 2\) differ"):
        minidl.stack([a, np.ones((3, 2))])
    with pytest.raises(ValueError, match=r"split: axis 1 of size 3 \(shape \(2, 3\)\) does not divide into 2"):
        a.split(2, axis=1)
    with pytest.raises(ValueError, match=r"expand: cannot broadcast a tensor of shape \(2, 3\) to shape \(4, 3\)"):
        a.expand(4, 3)
    with pytest.raises(ValueError, match=r"reshape: cannot reshape a tensor of shape \(2, 3\) into \(4,\)"):
        a.reshape(4)
    with pytest.raises(ValueError, match=r"squeeze: axis 0 of a tensor of shape \(2, 3\) has size 2"):
        a.squeeze(0)
    with pytest.raises(ValueError, match="pad: pad_width must be non-negative"):
        minidl.pad(a, -1)
    with pytest.raises(ValueError, match="pad: pad_width .* does not fit a tensor with 2 dimensions"):
        minidl.pad(a, ((1, 1), (1, 1), (1, 1)))
    with pytest.raises(IndexError, match=r"getitem: .* shape \(2, 3\)"):
        a[5]
    with pytest.raises(ValueError, match="axis 2 is out of range"):
        minidl.concatenate([a, a], axis=2)
