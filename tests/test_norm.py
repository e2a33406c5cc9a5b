"""BatchNorm1d/2d: gradchecks in train and eval mode, running statistics, the reduce hook (SyncBatchNorm's seam)."""

import numpy as np
import pytest

import minidl
import minidl.nn.functional as F
from minidl import nn
from minidl.nn.norm import batch_moments, batch_norm_train, combine_moments, local_moments


def _bn_fn(module):
    """fn(x, weight, bias) running module in its current mode with the given parameters (for gradcheck)."""

    def fn(x, w, b):
        module.weight, module.bias = w, b
        return module(x)

    return fn


@pytest.mark.parametrize(
    "cls,shape", [(nn.BatchNorm1d, (5, 3)), (nn.BatchNorm1d, (3, 2, 4)), (nn.BatchNorm2d, (3, 2, 3, 2))]
)
def test_batchnorm_train_gradcheck(rng, cls, shape):
    minidl.set_default_dtype(np.float64)
    bn = cls(shape[1])
    x = rng.standard_normal(shape) * 2 + 1
    w, b = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    assert minidl.gradcheck(_bn_fn(bn), [x, w, b])


def test_batchnorm_without_affine_gradcheck(rng):
    minidl.set_default_dtype(np.float64)
    bn = nn.BatchNorm2d(3, affine=False)
    assert [n for n, _ in bn.named_parameters()] == []
    assert minidl.gradcheck(lambda x: bn(x), [rng.standard_normal((2, 3, 2, 2))])


def test_batchnorm_eval_gradcheck(rng):
    minidl.set_default_dtype(np.float64)
    bn = nn.BatchNorm2d(2)
    bn.running_mean[...] = [0.5, -1.0]
    bn.running_var[...] = [2.0, 0.3]
    bn.eval()
    assert minidl.gradcheck(
        _bn_fn(bn), [rng.standard_normal((3, 2, 2, 2)), rng.standard_normal(2), rng.standard_normal(2)]
    )


def test_batchnorm_forward_and_running_stats(rng):
    minidl.set_default_dtype(np.float64)
    bn = nn.BatchNorm2d(3, momentum=0.2)
    x = rng.standard_normal((4, 3, 5, 5)) * 3 + 2
    y = bn(minidl.tensor(x)).data
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    expect = (x - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5)
    np.testing.assert_allclose(y, expect, rtol=1e-9, atol=1e-10)
    np.testing.assert_allclose(bn.running_mean, 0.2 * mean)
    np.testing.assert_allclose(bn.running_var, 0.8 + 0.2 * x.var(axis=(0, 2, 3), ddof=1))  # unbiased
    assert int(bn.num_batches_tracked) == 1
    bn.eval()
    y_eval = bn(minidl.tensor(x)).data
    np.testing.assert_allclose(
        y_eval, (x - bn.running_mean[:, None, None]) / np.sqrt(bn.running_var[:, None, None] + 1e-5), rtol=1e-10
    )
    assert int(bn.num_batches_tracked) == 1  # eval does not update
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]


def test_cumulative_average_and_no_running_stats(rng):
    minidl.set_default_dtype(np.float64)
    bn = nn.BatchNorm1d(2, momentum=None)
    xs = [rng.standard_normal((6, 2)) + i for i in range(3)]
    for x in xs:
        bn(minidl.tensor(x))
    np.testing.assert_allclose(bn.running_mean, np.mean([x.mean(0) for x in xs], axis=0))
    free = nn.BatchNorm1d(2, track_running_stats=False).eval()  # always batch statistics
    assert free.state_dict().keys() == {"weight", "bias"}
    np.testing.assert_allclose(free(minidl.tensor(xs[0])).data.mean(0), 0, atol=1e-12)


def test_gather_and_reduce_hooks_equal_one_big_batch(rng):
    """Two 'ranks' each holding half the batch, with gather = both ranks' moments and reduce = sum over
    both, match BatchNorm on the whole batch: the contract a SyncBatchNorm's collectives must meet
    (forward statistics and every gradient)."""
    minidl.set_default_dtype(np.float64)
    x = rng.standard_normal((6, 3, 2, 2)) * 2 - 1
    w, b = (
        minidl.tensor(rng.standard_normal(3), requires_grad=True),
        minidl.tensor(rng.standard_normal(3), requires_grad=True),
    )
    g = rng.standard_normal(x.shape)
    parts = [x[:2], x[2:]]
    table = np.stack([local_moments(p)[0] for p in parts])  # what the allgather gives every rank
    stats = [batch_moments(p, gather=lambda m: table) for p in parts]
    for s in stats:
        np.testing.assert_allclose(s.mean, x.mean(axis=(0, 2, 3)), rtol=1e-14)
        np.testing.assert_allclose(s.var, x.var(axis=(0, 2, 3)), rtol=1e-14)
        assert s.count == 24
    # Backward: run rank 0 and rank 1, each reducing the other's [sum dy, sum dy*xhat] into its own.
    mean, var = stats[0].mean, stats[0].var
    xhat = [(p - mean[:, None, None]) / np.sqrt(var[:, None, None] + 1e-5) for p in parts]
    gs = [g[:2], g[2:]]
    grad_sums = sum(np.stack([gi.sum(axis=(0, 2, 3)), (gi * xh).sum(axis=(0, 2, 3))]) for gi, xh in zip(gs, xhat))
    xs = [minidl.tensor(p, requires_grad=True) for p in parts]
    outs = []
    for xi, gi, s in zip(xs, gs, stats):
        out = batch_norm_train(xi, w, b, s, reduce=lambda _: grad_sums)
        out.backward(gi)
        outs.append(out)
    whole = minidl.tensor(x, requires_grad=True)
    w2, b2 = minidl.tensor(w.data, requires_grad=True), minidl.tensor(b.data, requires_grad=True)
    ref = F.batch_norm(whole, None, None, w2, b2, training=True)
    np.testing.assert_allclose(np.concatenate([o.data for o in outs]), ref.data, rtol=1e-10)
    ref.backward(g)
    np.testing.assert_allclose(np.concatenate([xi.grad for xi in xs]), whole.grad, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(w.grad, w2.grad, rtol=1e-9)  # local dgamma, summed over the two ranks' calls
    np.testing.assert_allclose(b.grad, b2.grad, rtol=1e-9)


def test_combine_moments_is_chans_formula_and_ignores_empty_parts(rng):
    """Moments of parts merged = moments of the whole, for a large mean (1e6) and uneven or empty parts."""
    x = 1e6 + 1e-2 * rng.standard_normal((20, 2, 3))
    cuts = [0, 0, 7, 8, 20]  # parts of 0, 7, 1 and 12 examples
    table = np.stack([local_moments(x[a:b])[0] for a, b in zip(cuts[:-1], cuts[1:])])
    count, mean, m2 = combine_moments(table)
    assert count == 60
    exact = x - 1e6  # exact in float64: the deviations, without the large mean
    np.testing.assert_allclose(mean - 1e6, exact.mean(axis=(0, 2)), rtol=0, atol=3e-10)  # 1e6 * 2^-52 = 2e-10
    np.testing.assert_allclose(m2, ((exact - exact.mean(axis=(0, 2), keepdims=True)) ** 2).sum(axis=(0, 2)), rtol=1e-7)
    assert combine_moments(np.zeros((3, 3, 2)))[0] == 0


@pytest.mark.parametrize(
    "dtype, mean, std, tol, tol_eval",
    [
        (np.float32, 1e3, 1.0, 2e-6, 1e-4),  # E[x^2] - E[x]^2 was off by 0.09 here; torch: 2e-5
        (np.float32, 1e4, 1.0, 2e-6, 1e-3),  # the old variance came out near 0, outputs off by ~1e3; torch: 5e-4
        (np.float64, 1e6, 1e-2, 1e-7, 1e-7),  # the old float64 output was off by ~1; torch: 4e-8
    ],
)
def test_large_mean_small_spread_is_normalized_accurately(dtype, mean, std, tol, tol_eval):
    """Issue 12, bug 2: outputs, running statistics and the eval-mode output against a float64 reference.
    Eval mode subtracts the running mean stored in x's dtype: float32 rounds 1e4 to within 5e-4 (as torch)."""
    rng = np.random.default_rng(0)
    x = (rng.standard_normal((16, 3, 8, 8)) * std + mean).astype(dtype)
    x64 = x.astype(np.float64)
    m, v = x64.mean(axis=(0, 2, 3), keepdims=True), x64.var(axis=(0, 2, 3), keepdims=True)
    bn = nn.BatchNorm2d(3, momentum=1.0, eps=1e-5 * std**2, dtype=dtype)  # eps scaled with the variance
    y = bn(minidl.tensor(x))
    ref = (x64 - m) / np.sqrt(v + 1e-5 * std**2)
    assert np.abs(y.data - ref).max() < tol
    np.testing.assert_allclose(bn.running_mean, m.ravel(), rtol=1e-6)
    np.testing.assert_allclose(bn.running_var, v.ravel() * x[:, 0].size / (x[:, 0].size - 1), rtol=1e-5)
    bn.eval()  # the running statistics (momentum 1: this batch's, unbiased) normalize as well
    ref_eval = (x64 - m) / np.sqrt(bn.running_var.astype(np.float64).reshape(1, 3, 1, 1) + 1e-5 * std**2)
    assert np.abs(bn(minidl.tensor(x)).data - ref_eval).max() < tol_eval


def test_batchnorm_errors():
    with pytest.raises(ValueError, match="expected a 4-D input with 3 channels"):
        nn.BatchNorm2d(3)(minidl.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="2-D or 3-D input with 4 channels"):
        nn.BatchNorm1d(4)(minidl.zeros(2, 3))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        nn.BatchNorm1d(3)(minidl.zeros(1, 3))
    nn.BatchNorm1d(3).eval()(minidl.zeros(1, 3))  # fine in eval mode
    with pytest.raises(ValueError, match="both weight and bias"):
        F.batch_norm(minidl.zeros(4, 3), None, None, minidl.ones(3), None, training=True)
