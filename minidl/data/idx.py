"""IDX files (the MNIST / Fashion-MNIST format), gzipped or not: reader and writer.

Layout (all integers big-endian)::

    bytes 0-1   0x00 0x00                  magic
    byte  2     dtype code                 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32,
                                           0x0D float32, 0x0E float64
    byte  3     ndim
    4 * ndim    dimension sizes, uint32
    then        prod(dims) items of the dtype, big-endian, C order

A file is treated as gzip when it starts with the gzip magic ``1f 8b``, whatever its name.
Every malformed input raises ``IDXError`` (a ValueError) naming the file and the problem.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path
from typing import BinaryIO

import numpy as np

from minidl.data.images import ImageSet

__all__ = ["IDXError", "load_idx", "save_idx", "load_mnist"]

# dtype code -> big-endian NumPy dtype
IDX_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_GZIP_MAGIC = b"\x1f\x8b"


class IDXError(ValueError):
    """A file that is not a well-formed IDX file."""


MAX_RATIO = 1032  # deflate's best compression: a gzip file of n bytes inflates to at most ~1032 n
DEFAULT_MAX_BYTES = 4 << 30  # 4 GiB of data; pass max_bytes= to allow more (MNIST's largest file: 47 MB)
MAX_DIMS = 64 if np.lib.NumpyVersion(np.__version__) >= "2.0.0" else 32  # NumPy's limit on dimensions
_CHUNK = 1 << 20


def _open(path: Path) -> tuple[BinaryIO, int]:
    """The file's (decompressed) byte stream and the most bytes it can hold (gzip: what deflate can produce)."""
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    size = path.stat().st_size
    with path.open("rb") as f:
        magic = f.read(2)
    if magic == _GZIP_MAGIC:
        return gzip.open(path, "rb"), MAX_RATIO * size
    return path.open("rb"), size


def _read_header(path: Path, f: BinaryIO) -> tuple[np.dtype, tuple[int, ...], int]:
    """(dtype, shape, header bytes) from the first 4 + 4 ndim bytes; nothing after them is read yet."""
    head = f.read(4)
    if len(head) < 4:
        raise IDXError(f"{path}: file too short for an IDX header ({len(head)} bytes, need at least 4)")
    if head[0] != 0 or head[1] != 0:
        raise IDXError(f"{path}: bad magic number: first two bytes are {head[:2].hex()}, expected 0000")
    code, ndim = head[2], head[3]
    if code not in IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise IDXError(f"{path}: unknown dtype code 0x{code:02X} (known: {known})")
    if ndim > MAX_DIMS:
        raise IDXError(f"{path}: {ndim} dimensions, more than NumPy's {MAX_DIMS}")
    dims = f.read(4 * ndim)
    header = 4 + 4 * ndim
    if len(dims) < 4 * ndim:
        raise IDXError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, file has {4 + len(dims)}")
    return IDX_DTYPES[code], tuple(int(d) for d in np.frombuffer(dims, dtype=">u4")), header


def _read_body(f: BinaryIO, expected: int) -> tuple[bytearray, int]:
    """The ``expected`` data bytes, read in chunks into memory that fills as the data really arrives (a header
    that lies about a short file commits nothing), and how many bytes the stream held: past ``expected`` at most
    one chunk more is inflated, so trailing data is found without inflating all of it."""
    raw = bytearray(expected)
    view, got = memoryview(raw), 0
    while got < expected:
        n = f.readinto(view[got : got + _CHUNK])  # type: ignore[attr-defined]
        if not n:
            return raw, got
        got += n
    return raw, got + len(f.read(_CHUNK))


def load_idx(path: str | Path, max_bytes: int = DEFAULT_MAX_BYTES) -> np.ndarray:
    """Read an IDX file into an array of its shape, in native byte order (uint8 for MNIST).

    The header is read and checked first (magic, dtype, at most NumPy's number of dimensions, sizes that the
    file can hold and that stay within ``max_bytes``) and only then the data, exactly the bytes it declares: a
    gzip file is never inflated past one chunk beyond what its header asks for, and a corrupt or impossible
    header is an ``IDXError`` naming the file.
    """
    path = Path(path)
    stream, most = _open(path)
    try:
        with stream as f:
            dtype, shape, header = _read_header(path, f)
            expected = int(np.prod(shape, dtype=object)) * dtype.itemsize
            native = dtype.newbyteorder("=")
            if header + expected > most and most == path.stat().st_size:  # a plain file, too short
                raise _mismatch(path, shape, native, expected, most - header)
            if header + expected > most:
                raise IDXError(
                    f"{path}: impossible dimensions {shape}: {expected} bytes of {native}, more than a gzip file of "
                    f"{path.stat().st_size} bytes can hold ({most} at most)"
                )
            if expected > max_bytes:
                raise IDXError(
                    f"{path}: dimensions {shape} declare {expected} bytes of {native}, more than the limit of "
                    f"{max_bytes} (pass max_bytes= to read a larger file)"
                )
            raw, actual = _read_body(f, expected)
    except (OSError, EOFError, zlib.error) as e:
        raise IDXError(f"{path}: corrupt or truncated gzip data ({e})") from None
    if actual != expected:
        raise _mismatch(path, shape, native, expected, actual, complete=actual < expected + _CHUNK)
    return np.frombuffer(raw, dtype=dtype).reshape(shape).astype(native)  # native order, writable copy


def _mismatch(
    path: Path, shape: tuple[int, ...], dtype: np.dtype, expected: int, actual: int, complete: bool = True
) -> IDXError:
    """The file holds ``actual`` data bytes (or, not ``complete``, more: trailing data is not inflated to the end)."""
    what = "truncated" if actual < expected else "has trailing bytes"
    has = actual if complete else f"more than {actual}"
    return IDXError(
        f"{path}: size mismatch ({what}): shape {shape} of {dtype} needs {expected} data bytes, file has {has}"
    )


def save_idx(path: str | Path, array: np.ndarray, compress: bool | None = None) -> None:
    """Write ``array`` as IDX; gzip-compressed if ``compress`` (default: path ends with ``.gz``)."""
    path = Path(path)
    a = np.asarray(array)
    code = next((c for c, dt in IDX_DTYPES.items() if dt.newbyteorder("=") == a.dtype.newbyteorder("=")), None)
    if code is None:
        raise TypeError(f"save_idx: dtype {a.dtype} has no IDX code (use uint8, int8, int16, int32, float32, float64)")
    if a.ndim > 255 or any(d >= 2**32 for d in a.shape):
        raise ValueError(f"save_idx: shape {a.shape} does not fit IDX (ndim <= 255, dims < 2**32)")
    payload = (
        bytes([0, 0, code, a.ndim])
        + np.asarray(a.shape, dtype=">u4").tobytes()
        + np.ascontiguousarray(a, dtype=IDX_DTYPES[code]).tobytes()
    )
    if compress is None:
        compress = path.suffix == ".gz"
    path.write_bytes(gzip.compress(payload, mtime=0) if compress else payload)


def _find(directory: Path, stem: str) -> Path:
    for name in (stem, stem + ".gz"):
        if (directory / name).is_file():
            return directory / name
    raise FileNotFoundError(f"{directory}: neither {stem} nor {stem}.gz found")


def load_mnist(directory: str | Path, kind: str = "train") -> tuple[np.ndarray, np.ndarray]:
    """MNIST or Fashion-MNIST from ``directory``: ``(images [N, 28, 28] uint8, labels [N] uint8)``.

    ``kind`` is ``"train"`` or ``"t10k"``; files are ``{kind}-images-idx3-ubyte`` and
    ``{kind}-labels-idx1-ubyte``, each optionally ``.gz``. For a network:
    ``images[:, None].astype(np.float32) / 255``.
    """
    if kind not in ("train", "t10k"):
        raise ValueError(f"load_mnist: kind must be 'train' or 't10k', got {kind!r}")
    directory = Path(directory)
    if not directory.is_dir():
        raise NotADirectoryError(f"MNIST directory not found: {directory}")
    image_path = _find(directory, f"{kind}-images-idx3-ubyte")
    label_path = _find(directory, f"{kind}-labels-idx1-ubyte")
    images, labels = load_idx(image_path), load_idx(label_path)
    if images.ndim != 3 or images.dtype != np.uint8:
        raise IDXError(f"{image_path}: expected uint8 images [N, rows, cols], got {images.dtype} {images.shape}")
    if labels.ndim != 1 or labels.dtype != np.uint8:
        raise IDXError(f"{label_path}: expected uint8 labels [N], got {labels.dtype} {labels.shape}")
    if images.shape[0] != labels.shape[0]:
        raise IDXError(f"{directory}: {images.shape[0]} images but {labels.shape[0]} labels")
    return images, labels


def mnist_images(directory: str | Path) -> ImageSet:
    """MNIST-format IDX files as single-label images: uint8 ``[N, 28, 28]`` -> float32 ``[N, 1, 28, 28]`` in
    [0, 1], labels as class ids ``[N]`` int64."""
    (x, y), (xt, yt) = load_mnist(directory, "train"), load_mnist(directory, "t10k")
    prep = lambda a: (np.asarray(a, np.float32) / 255.0)[:, None]
    y, yt, classes = y.astype(np.int64), yt.astype(np.int64), tuple(str(c) for c in range(int(y.max()) + 1))
    return ImageSet(prep(x), y, prep(xt), yt, classes, f"IDX files in {directory}", multilabel=False)
