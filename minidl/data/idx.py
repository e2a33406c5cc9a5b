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

import numpy as np

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


def _read_bytes(path: Path) -> bytes:
    if not path.is_file():
        raise FileNotFoundError(f"IDX file not found: {path}")
    raw = path.read_bytes()
    if raw[:2] == _GZIP_MAGIC:
        try:
            return gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as e:
            raise IDXError(f"{path}: corrupt or truncated gzip data ({e})") from None
    return raw


def load_idx(path: str | Path) -> np.ndarray:
    """Read an IDX file into an array of its shape, in native byte order (uint8 for MNIST)."""
    path = Path(path)
    raw = _read_bytes(path)
    if len(raw) < 4:
        raise IDXError(f"{path}: file too short for an IDX header ({len(raw)} bytes, need at least 4)")
    if raw[0] != 0 or raw[1] != 0:
        raise IDXError(f"{path}: bad magic number: first two bytes are {raw[:2].hex()}, expected 0000")
    code, ndim = raw[2], raw[3]
    if code not in IDX_DTYPES:
        known = ", ".join(f"0x{c:02X}" for c in IDX_DTYPES)
        raise IDXError(f"{path}: unknown dtype code 0x{code:02X} (known: {known})")
    header = 4 + 4 * ndim
    if len(raw) < header:
        raise IDXError(f"{path}: truncated header: {ndim} dimensions need {header} bytes, file has {len(raw)}")
    shape = tuple(int(d) for d in np.frombuffer(raw, dtype=">u4", count=ndim, offset=4))
    dtype = IDX_DTYPES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    actual = len(raw) - header
    if actual != expected:
        what = "truncated" if actual < expected else "has trailing bytes"
        raise IDXError(
            f"{path}: size mismatch ({what}): shape {shape} of {dtype.newbyteorder('=')} needs {expected} data bytes, "
            f"file has {actual}"
        )
    data = np.frombuffer(raw, dtype=dtype, offset=header).reshape(shape)
    return data.astype(dtype.newbyteorder("="))  # native order, writable copy


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
