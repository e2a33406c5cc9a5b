"""SGD's block-wise update against the plain expression: the same float operations, so the same bits."""

import numpy as np
import pytest

from minidl.optim.sgd import BLOCK, subtract_scaled


@pytest.mark.parametrize("lr", [0.37, 1.0])
@pytest.mark.parametrize("size", [7, BLOCK, 3 * BLOCK + 5])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_subtract_scaled_is_bitwise_the_plain_update(rng, size, dtype, lr):
    p, g = rng.standard_normal(size).astype(dtype), rng.standard_normal(size).astype(dtype)
    g[:3] = [np.inf, -np.inf, np.nan] if size > 3 else g[:3]
    expected = p - dtype(lr) * g
    subtract_scaled(p, lr, g)
    np.testing.assert_array_equal(p, expected)


def test_subtract_scaled_non_contiguous_falls_back(rng):
    p = rng.standard_normal((BLOCK // 64, 256))
    g = rng.standard_normal((256, BLOCK // 64)).T  # a transposed view
    expected = p - 0.5 * g
    subtract_scaled(p, 0.5, g)
    np.testing.assert_array_equal(p, expected)
