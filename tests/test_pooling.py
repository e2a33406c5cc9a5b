"""Pool options (ceil_mode, MaxPool2d dilation, padding, divisor_override, unbatched input) against a direct
loop over the windows written from the definition, and gradchecks in float64."""

import itertools

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn.pooling import pool_output_size


def direct_pool(x, k, s, p, d, ceil_mode, kind, count_include_pad=True):
    """Loop over output cells; each window's taps, those in the padding or past it left out (max) or
    counted by PyTorch's rule (average: the window clipped to input + padding)."""
    n, c, h, w = x.shape
    oh, ow = (pool_output_size(size, k[i], s[i], p[i], d[i], ceil_mode) for i, size in enumerate((h, w)))
    out = np.empty((n, c, oh, ow))
    for i, j in itertools.product(range(oh), range(ow)):
        rows = [i * s[0] - p[0] + a * d[0] for a in range(k[0])]
        cols = [j * s[1] - p[1] + b * d[1] for b in range(k[1])]
        inside = [(r, q) for r in rows for q in cols if 0 <= r < h and 0 <= q < w]
        vals = np.stack([x[:, :, r, q] for r, q in inside], axis=-1)
        if kind == "max":
            out[:, :, i, j] = vals.max(axis=-1)
        else:
            clip = lambda start, kk, size, pp: min(start + kk, size + pp) - start  # noqa: E731
            full = clip(i * s[0] - p[0], k[0], h, p[0]) * clip(j * s[1] - p[1], k[1], w, p[1])
            out[:, :, i, j] = vals.sum(axis=-1) / (full if count_include_pad else len(inside))
    return out


CASES = [  # kernel, stride, padding, dilation, ceil_mode, input H x W
    ((3, 3), (2, 2), (1, 1), (1, 1), True, (7, 8)),
    ((2, 2), (2, 2), (0, 0), (1, 1), True, (5, 5)),
    ((3, 2), (2, 3), (1, 0), (2, 1), False, (9, 7)),
    ((3, 3), (2, 2), (1, 1), (2, 2), True, (8, 9)),
    ((2, 3), (3, 2), (1, 1), (1, 2), True, (6, 7)),
]


@pytest.mark.parametrize("k, s, p, d, ceil_mode, hw", CASES)
def test_max_pool_options_match_the_definition(rng, k, s, p, d, ceil_mode, hw):
    x = rng.standard_normal((2, 3) + hw)
    fn = lambda t: F.max_pool2d(t, k, s, p, dilation=d, ceil_mode=ceil_mode)  # noqa: E731
    np.testing.assert_array_equal(fn(minidl.tensor(x)).data, direct_pool(x, k, s, p, d, ceil_mode, "max"))
    assert minidl.gradcheck(fn, [x])


@pytest.mark.parametrize("k, s, p, _, ceil_mode, hw", CASES)
@pytest.mark.parametrize("count_include_pad", [True, False])
def test_avg_pool_options_match_the_definition(rng, k, s, p, _, ceil_mode, hw, count_include_pad):
    x = rng.standard_normal((2, 3) + hw)
    fn = lambda t: F.avg_pool2d(t, k, s, p, ceil_mode=ceil_mode, count_include_pad=count_include_pad)  # noqa: E731
    ref = direct_pool(x, k, s, p, (1, 1), ceil_mode, "avg", count_include_pad)
    np.testing.assert_allclose(fn(minidl.tensor(x)).data, ref, rtol=1e-12)
    assert minidl.gradcheck(fn, [x])


def test_divisor_override_and_unbatched_input(rng):
    x = rng.standard_normal((3, 6, 6))
    out = nn.AvgPool2d(2, divisor_override=3)(minidl.tensor(x))
    np.testing.assert_allclose(out.data, direct_pool(x[None], (2, 2), (2, 2), (0, 0), (1, 1), False, "avg")[0] * 4 / 3)
    assert out.shape == (3, 3, 3)
    m = nn.MaxPool2d(3, stride=2, padding=1, dilation=2, ceil_mode=True)
    np.testing.assert_array_equal(m(minidl.tensor(x)).data, m(minidl.tensor(x[None])).data[0])
    assert minidl.gradcheck(lambda t: m(t), [x])


def test_pool_option_errors():
    with pytest.raises(NotImplementedError, match="not supported: return_indices"):
        nn.MaxPool2d(2, return_indices=True)
    with pytest.raises(ValueError, match="dilation must be >= 1"):
        nn.MaxPool2d(2, dilation=0)
    with pytest.raises(ValueError, match="smaller than the window"):
        F.max_pool2d(minidl.zeros(1, 1, 4, 4), 3, dilation=2)
    with pytest.raises(ValueError, match="divisor_override must be >= 1"):
        F.avg_pool2d(minidl.zeros(1, 1, 4, 4), 2, divisor_override=0)
