"""Generated multi-label images and the batches() minibatch iterator."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from minidl.data import SHAPE_CLASSES, batches, generated_images, make_shapes


def test_shapes_dtypes_and_determinism():
    x, y = make_shapes(50, size=24, channels=3, seed=4)
    assert x.shape == (50, 3, 24, 24) and x.dtype == np.float32
    assert y.shape == (50, len(SHAPE_CLASSES)) and y.dtype == np.float32
    assert set(np.unique(y)) <= {0.0, 1.0}
    x2, y2 = make_shapes(50, size=24, channels=3, seed=4)
    np.testing.assert_array_equal(x, x2)
    np.testing.assert_array_equal(y, y2)
    assert not np.array_equal(make_shapes(50, size=24, channels=3, seed=5)[0], x)


def test_labels_match_what_was_drawn():
    x, y, masks = make_shapes(400, noise=0.0, background=0.0, seed=1, return_masks=True)
    assert masks.shape == (400, len(SHAPE_CLASSES), 32, 32)
    # A class is labelled present exactly when its mask has pixels.
    np.testing.assert_array_equal(masks.any(axis=(2, 3)), y.astype(bool))
    # Without noise and background, the image is bright exactly on the union of the masks.
    np.testing.assert_array_equal(x[:, 0] > 0, masks.any(axis=1))
    assert x[:, 0][masks.any(axis=1)].min() >= 0.5  # every drawn pixel has the shape's intensity
    # Label rate ~ p_present = 0.4 for each class.
    np.testing.assert_allclose(y.mean(axis=0), 0.4, atol=0.08)


def test_each_class_draws_its_own_shape():
    """Fill ratio (mask area / bounding-box area) identifies the shape: square ~1, disk ~pi/4,
    triangle ~1/2, cross and thin line much less."""
    _, y, masks = make_shapes(300, noise=0.0, seed=2, return_masks=True)
    ratios = {}
    for k, kind in enumerate(SHAPE_CLASSES):
        r = []
        for m in masks[y[:, k] > 0, k]:
            rows, cols = np.flatnonzero(m.any(1)), np.flatnonzero(m.any(0))
            r.append(m.sum() / ((rows[-1] - rows[0] + 1) * (cols[-1] - cols[0] + 1)))
        ratios[kind] = np.mean(r)
    assert ratios["square"] > 0.95
    assert 0.7 < ratios["circle"] < 0.85
    assert 0.45 < ratios["triangle"] < 0.65
    assert ratios["cross"] < 0.6 and ratios["line"] < 0.5
    # Every drawn shape lies fully inside the image (never clipped away to nothing).
    area = masks.sum(axis=(2, 3))[y > 0]
    assert area.min() >= 6


def test_generated_images_config():
    data = generated_images("quick", seed=0)
    assert data.x_train.shape == (1000, 1, 32, 32) and data.x_test.shape == (300, 1, 32, 32)
    assert data.classes == SHAPE_CLASSES
    assert not np.array_equal(data.x_train[:300], data.x_test)  # independent draws
    small = generated_images("quick", n_train=10, n_test=5, channels=3, classes=("circle", "line"))
    assert small.x_train.shape == (10, 3, 32, 32) and small.y_train.shape == (10, 2)
    assert small.classes == ("circle", "line")


def test_image_errors():
    with pytest.raises(ValueError, match="unknown shape class 'hexagon'"):
        make_shapes(3, classes=("circle", "hexagon"))
    with pytest.raises(ValueError, match="size >= 8"):
        make_shapes(3, size=4)
    with pytest.raises(ValueError, match="p_present"):
        make_shapes(3, p_present=1.5)
    with pytest.raises(ValueError, match="unknown image config"):
        generated_images("huge")


# ----------------------------------------------------------------------------- batches
def test_batches_single_process_epoch():
    X = np.arange(10)[:, None] * np.ones((1, 3))
    Y = np.arange(10)
    seen = [yb for _, yb in batches(X, Y, 4, seed=1, epoch=0)]
    assert [b.size for b in seen] == [4, 4, 2]
    assert sorted(np.concatenate(seen).tolist()) == list(range(10))  # every sample once
    for xb, yb in batches(X, Y, 4, seed=1):
        np.testing.assert_array_equal(xb[:, 0], yb)  # X and Y stay paired
    assert [b.size for _, b in batches(X, Y, 4, drop_last=True)] == [4, 4]
    assert np.concatenate([b for _, b in batches(X, Y, 4, shuffle=False)]).tolist() == list(range(10))
    order = lambda **kw: np.concatenate([b for _, b in batches(X, Y, 4, **kw)]).tolist()
    assert order(seed=1, epoch=0) == order(seed=1, epoch=0)
    assert order(seed=1, epoch=0) != order(seed=1, epoch=1)  # a new shuffle each epoch


@settings(max_examples=30)
@given(
    n=st.integers(0, 60),
    batch_size=st.integers(1, 7),
    world=st.integers(1, 5),
    drop_last=st.booleans(),
    shuffle=st.booleans(),
    epoch=st.integers(0, 3),
)
def test_batches_rank_union_is_the_single_process_batch(n, batch_size, world, drop_last, shuffle, epoch):
    X, Y = np.arange(n) * 10, np.arange(n)
    kw = dict(shuffle=shuffle, seed=7, epoch=epoch, drop_last=drop_last)
    single = [yb for _, yb in batches(X, Y, batch_size * world, **kw)]
    per_rank = [[yb for _, yb in batches(X, Y, batch_size, rank=r, world=world, **kw)] for r in range(world)]
    assert all(len(steps) == len(single) for steps in per_rank)  # same number of steps on every rank
    for i, global_batch in enumerate(single):
        np.testing.assert_array_equal(np.concatenate([steps[i] for steps in per_rank]), global_batch)
        sizes = [steps[i].size for steps in per_rank]
        assert max(sizes) - min(sizes) <= 1


def test_batches_errors():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="X has 5 samples but Y has 4"):
        next(batches(X, np.zeros(4), 2))
    with pytest.raises(ValueError, match=r"rank must be in \[0, 2\)"):
        next(batches(X, np.zeros(5), 2, rank=3, world=2))
    with pytest.raises(ValueError, match="batch_size and world must be >= 1"):
        next(batches(X, np.zeros(5), 0))
