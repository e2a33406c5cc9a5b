"""Generated multi-label images (a stand-in for multi-label chest X-rays) and a minibatch iterator.

Each image may contain any subset of ``K`` shape classes (circle, square, triangle, cross, line),
each present independently with probability ``p_present``, at a random position and size, with a
random intensity. Shapes add up where they overlap (like attenuation in a radiograph), on a
smooth random background with Gaussian noise. The label of an image is the set of classes drawn
in it: ``labels[n, k] = 1`` iff shape ``k`` is in image ``n`` (at least one pixel, by
construction). The task, like chest X-ray findings, is K independent binary decisions, trained
with ``F.binary_cross_entropy_with_logits`` and scored by per-label accuracy.

All images are drawn at once: per class, a boolean mask ``[n, H, W]`` is computed with
broadcasting from per-image parameters (center, size, angle) against the pixel grid.

``batches`` is a minimal DataLoader: one shuffle per epoch from (seed, epoch), identical on
every rank, split across ranks so that data-parallel training sees the same global batches as
one process (see its docstring).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

__all__ = ["SHAPE_CLASSES", "ImageSet", "IMAGE_CONFIGS", "make_shapes", "generated_images", "batches"]

SHAPE_CLASSES = ("circle", "square", "triangle", "cross", "line")


def _shape_mask(kind: str, yy: np.ndarray, xx: np.ndarray, cy, cx, r, angle) -> np.ndarray:
    """Boolean masks [n, H, W] of one shape kind; cy, cx, r, angle are [n, 1, 1] arrays."""
    dy, dx = yy - cy, xx - cx
    if kind == "circle":  # filled disk of radius r
        return dy * dy + dx * dx <= r * r
    if kind == "square":  # filled axis-aligned square, half-side 0.85 r (about the disk's area)
        h = 0.85 * r
        return (np.abs(dy) <= h) & (np.abs(dx) <= h)
    if kind == "triangle":  # filled, apex up at cy - r, base of half-width r at cy + r
        return (dy <= r) & (np.abs(dx) <= (dy + r) / 2)
    if kind == "cross":  # a plus sign: two bars of half-length r and half-thickness ~r/4
        t = np.maximum(1.0, r / 4)
        return ((np.abs(dx) <= t) & (np.abs(dy) <= r)) | ((np.abs(dy) <= t) & (np.abs(dx) <= r))
    if kind == "line":  # segment of half-length r through the center, at `angle`, ~1.5 px thick
        ux, uy = np.cos(angle), np.sin(angle)
        along = dx * ux + dy * uy
        across = -dx * uy + dy * ux
        return (np.abs(along) <= r) & (np.abs(across) <= 0.75)
    raise ValueError(f"unknown shape class {kind!r}; known: {SHAPE_CLASSES}")


def make_shapes(
    n: int,
    size: int = 32,
    channels: int = 1,
    classes: tuple[str, ...] = SHAPE_CLASSES,
    p_present: float = 0.4,
    noise: float = 0.1,
    background: float = 0.2,
    seed: int = 0,
    return_masks: bool = False,
):
    """Draw ``n`` images. Returns ``(images [n, channels, size, size] float32, labels [n, K] float32)``,
    plus ``masks [n, K, size, size] bool`` if ``return_masks``.

    Shape sizes scale with the image: radius in ``[0.1, 0.22] * size`` (lines: ``[0.18, 0.4] * size``),
    always fully inside the image. Intensities are in [0.5, 1]; ``background`` is the amplitude of
    a random linear gradient; ``noise`` the std of additive Gaussian noise. With ``channels > 1``
    each shape gets a random gain in [0.6, 1] per channel.
    """
    if n < 0 or size < 8 or channels < 1:
        raise ValueError(f"make_shapes: need n >= 0, size >= 8, channels >= 1; got {n}, {size}, {channels}")
    if not 0.0 <= p_present <= 1.0:
        raise ValueError(f"make_shapes: p_present must be in [0, 1], got {p_present}")
    for kind in classes:
        if kind not in SHAPE_CLASSES:
            raise ValueError(f"unknown shape class {kind!r}; known: {SHAPE_CLASSES}")
    rng = np.random.default_rng([seed, 0x1A6E])
    K = len(classes)
    labels = (rng.random((n, K)) < p_present).astype(np.float32)
    images = np.zeros((n, channels, size, size), dtype=np.float32)
    masks = np.zeros((n, K, size, size), dtype=bool) if return_masks else None
    grid = np.arange(size, dtype=np.float32)
    yy, xx = grid[:, None], grid[None, :]
    for k, kind in enumerate(classes):
        idx = np.flatnonzero(labels[:, k])
        m = idx.size
        lo, hi = (0.18, 0.4) if kind == "line" else (0.1, 0.22)
        r = rng.uniform(lo * size, hi * size, m).astype(np.float32)
        # Centers keep the whole shape (at most r from the center in each axis) inside the image.
        cy = rng.uniform(r, size - 1 - r).astype(np.float32)
        cx = rng.uniform(r, size - 1 - r).astype(np.float32)
        angle = rng.uniform(0, np.pi, m).astype(np.float32)
        intensity = rng.uniform(0.5, 1.0, (m, 1)).astype(np.float32)
        gain = np.ones((m, channels), np.float32) if channels == 1 else rng.uniform(0.6, 1.0, (m, channels))
        col = lambda a: a[:, None, None]
        mask = _shape_mask(kind, yy, xx, col(cy), col(cx), col(r), col(angle))
        weight = (intensity * gain).astype(np.float32)  # [m, channels]
        for c in range(channels):  # one channel at a time: a [m, H, W] temporary, not [m, C, H, W]
            images[idx, c] += mask * weight[:, c, None, None]
        if masks is not None:
            masks[idx, k] = mask
    # Smooth background: a random linear ramp a + b*y + c*x, then noise.
    ramp = rng.uniform(-1.0, 1.0, (n, 3)).astype(np.float32) * background
    images += (ramp[:, 0, None, None] + ramp[:, 1, None, None] * yy / size + ramp[:, 2, None, None] * xx / size)[
        :, None
    ]
    if noise > 0:
        images += rng.standard_normal(images.shape, dtype=np.float32) * np.float32(noise)
    return (images, labels, masks) if return_masks else (images, labels)


@dataclass
class ImageSet:
    """Train and test images ``[N, C, H, W]`` float32 with multi-hot labels ``[N, K]`` float32 (``multilabel``),
    or with class ids ``[N]`` int64 (``minidl.data.idx.mnist_images``)."""

    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    classes: tuple[str, ...]
    name: str = "generated multi-label shapes"
    multilabel: bool = True

    def __repr__(self) -> str:
        return (
            f"ImageSet(train {self.x_train.shape}, test {self.x_test.shape}, classes {self.classes}, "
            f"label rate {self.y_train.mean():.2f})"
        )


IMAGE_CONFIGS: dict[str, dict] = {
    "default": dict(n_train=10_000, n_test=2_000, size=32, channels=1),
    "quick": dict(n_train=1_000, n_test=300, size=32, channels=1),
    "tiny": dict(n_train=256, n_test=64, size=32, channels=1),  # a ResNet-50's --quick run
}


def generated_images(config: str = "default", seed: int = 0, **overrides) -> ImageSet:
    """The generated multi-label image set. ``config`` names an entry of ``IMAGE_CONFIGS``; keyword
    ``overrides`` replace its entries or pass through to ``make_shapes`` (``channels=3``, ``noise=0.2``).
    Train and test are independent draws (seeds derived from ``seed``)."""
    if config not in IMAGE_CONFIGS:
        raise ValueError(f"unknown image config {config!r}; choose from {sorted(IMAGE_CONFIGS)}")
    params = {**IMAGE_CONFIGS[config], **overrides}
    n_train, n_test = params.pop("n_train"), params.pop("n_test")
    x_train, y_train = make_shapes(n_train, seed=2 * seed, **params)
    x_test, y_test = make_shapes(n_test, seed=2 * seed + 1, **params)
    classes = tuple(params.get("classes", SHAPE_CLASSES))
    return ImageSet(x_train, y_train, x_test, y_test, classes, f"generated multi-label shapes ({config})")


def batches(
    X: np.ndarray,
    Y: np.ndarray,
    batch_size: int,
    shuffle: bool = True,
    seed: int = 0,
    epoch: int = 0,
    rank: int = 0,
    world: int = 1,
    drop_last: bool = False,
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """Minibatches ``(X[idx], Y[idx])`` for one epoch; ``batch_size`` is the per-rank batch size.

    The order is one permutation of ``range(N)`` drawn from ``(seed, epoch)``, the same on every
    rank (or ``range(N)`` if not ``shuffle``). It is cut into global batches of
    ``G = batch_size * world`` consecutive indices; at step i, rank r takes the r-th slice of
    ``batch_size`` of global batch i. So at every step, concatenating the ranks' batches in rank
    order gives exactly the batch of size G that a single process (``world=1``, ``batch_size=G``)
    draws: data-parallel SGD averaging over ranks equals single-process SGD on batch G.

    The last global batch, if shorter than G, is skipped with ``drop_last``; otherwise it is split
    over the ranks with ``np.array_split`` (sizes differ by at most one and may be zero), which
    keeps the concatenation property; gradient averaging must then weight ranks by batch size.
    """
    X, Y = np.asarray(X), np.asarray(Y)
    if X.shape[0] != Y.shape[0]:
        raise ValueError(f"batches: X has {X.shape[0]} samples but Y has {Y.shape[0]}")
    if batch_size < 1 or world < 1:
        raise ValueError(f"batches: batch_size and world must be >= 1, got {batch_size}, {world}")
    if not 0 <= rank < world:
        raise ValueError(f"batches: rank must be in [0, {world}), got {rank}")
    N, G = X.shape[0], batch_size * world
    order = np.random.default_rng([seed, epoch]).permutation(N) if shuffle else np.arange(N)
    for start in range(0, N, G):
        glob = order[start : start + G]
        if glob.size < G:
            if drop_last:
                return
            idx = np.array_split(glob, world)[rank]
        else:
            idx = glob[rank * batch_size : (rank + 1) * batch_size]
        yield X[idx], Y[idx]
