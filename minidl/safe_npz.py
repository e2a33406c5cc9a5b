"""Read the arrays of an .npz archive without trusting a single size it declares.

``np.load`` believes the archive: a zip entry that claims 2**40 bytes, or an .npy header that
declares a shape of 10**12 elements, makes it allocate (MemoryError) or inflate (a "zip bomb")
before anything is checked. A checkpoint may come from another run, another machine or a
truncated copy, so ``read_npz`` checks every declared size before it allocates:

- each entry's uncompressed size (from the zip directory) must fit: a stored entry in the file
  itself, a deflated one within what deflate can produce (at most ~1032 x its compressed size);
  the deflated entries together within ``max_decompressed`` bytes (a limit the caller may raise);
- each .npy header (magic, version, dict with ``descr``, ``fortran_order``, ``shape``) is read
  first, its dtype refused if it holds Python objects (pickle), and ``prod(shape) x itemsize``
  must equal the bytes the entry holds after its header;
- an entry name that stands twice is refused (zipfile would silently read the last one);
- only then are the bytes read (zipfile checks their CRC-32 at the end of each entry).

Every failure is a ``CheckpointError`` naming the file and the entry.
"""

from __future__ import annotations

import os
import tokenize
import zipfile
import zlib
from typing import IO

import numpy as np

DEFAULT_MAX_DECOMPRESSED = 4 << 30  # 4 GiB of inflated data; pass max_decompressed= to allow more
DEFLATE_MAX_RATIO = 1032  # deflate's best case: 258 bytes from a 2-bit code, about 1032:1


class CheckpointError(ValueError):
    """A file that is not a readable minidl checkpoint (corrupt, truncated, pickled data, bad manifest)."""


def read_npz(path: str, max_decompressed: int = DEFAULT_MAX_DECOMPRESSED) -> dict[str, np.ndarray]:
    """Every array of the .npz at ``path``, by name (the entry name without ``.npy``), sizes checked first."""
    file_size = os.path.getsize(path)
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
            _check_unique(path, infos)
            _check_sizes(path, infos, file_size, max_decompressed)
            return {_name(path, info): _read_entry(path, archive, info) for info in infos}
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, NotImplementedError) as e:
        raise CheckpointError(f"load: {path!r} is truncated or corrupt ({type(e).__name__}: {e})") from None


def _check_unique(path: str, infos: list[zipfile.ZipInfo]) -> None:
    """Refuse an entry name that stands twice: which of the two is meant is anyone's guess (zipfile takes the last)."""
    seen: set[str] = set()
    for info in infos:
        if info.filename in seen:
            raise CheckpointError(
                f"load: {path!r}: entry {info.filename!r} appears twice (a tampered or merged archive)"
            )
        seen.add(info.filename)


def _name(path: str, info: zipfile.ZipInfo) -> str:
    if not info.filename.endswith(".npy"):
        raise CheckpointError(f"load: {path!r}: entry {info.filename!r} is not an .npy array")
    return info.filename[: -len(".npy")]


def _check_sizes(path: str, infos: list[zipfile.ZipInfo], file_size: int, max_decompressed: int) -> None:
    """Refuse declared sizes the file cannot hold, before anything is inflated."""
    inflated = 0
    for info in infos:
        where = f"load: {path!r}: entry {info.filename!r}"
        if info.compress_size > file_size:
            raise CheckpointError(f"{where} declares {info.compress_size} bytes, more than the file's {file_size}")
        if info.compress_type == zipfile.ZIP_STORED and info.file_size != info.compress_size:
            raise CheckpointError(
                f"{where} is stored uncompressed but declares {info.file_size} bytes in {info.compress_size}"
            )
        if info.compress_type != zipfile.ZIP_STORED:
            if info.file_size > DEFLATE_MAX_RATIO * info.compress_size + 1024:
                raise CheckpointError(
                    f"{where} declares {info.file_size} bytes from {info.compress_size} compressed: more than "
                    "deflate can produce"
                )
            inflated += info.file_size
    if inflated > max_decompressed:
        raise CheckpointError(
            f"load: {path!r} would inflate to {inflated} bytes, more than the limit of {max_decompressed} "
            "(pass max_decompressed= to load a larger checkpoint)"
        )


def _read_entry(path: str, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    where = f"load: {path!r}: entry {info.filename!r}"
    with archive.open(info) as f:
        dtype, shape, fortran, header_size = _read_header(f, where)
        count = int(np.prod(shape, dtype=object))  # Python ints: a product that overflows int64 is still exact
        nbytes = count * dtype.itemsize
        if header_size + nbytes != info.file_size:
            raise CheckpointError(
                f"{where}: shape {shape} of {dtype} needs {nbytes} bytes, the entry holds "
                f"{info.file_size - header_size}"
            )
        data = _read_exactly(f, nbytes, where)
        f.read()  # reach the end of the entry, where zipfile checks its CRC-32
    arr = np.frombuffer(data, dtype=dtype, count=count)
    return arr.reshape(shape[::-1]).T.copy() if fortran else arr.reshape(shape)


def _read_header(f: IO[bytes], where: str) -> tuple[np.dtype, tuple[int, ...], bool, int]:
    """(dtype, shape, fortran_order, header bytes) of an .npy stream, refusing object dtypes."""
    fmt = np.lib.format
    try:
        major, minor = fmt.read_magic(f)
        reader = {(1, 0): fmt.read_array_header_1_0, (2, 0): fmt.read_array_header_2_0}.get((major, minor))
        if reader is None:
            raise ValueError(f"unsupported .npy version {major}.{minor}")
        shape, fortran, dtype = reader(f, max_header_size=1 << 16)
    except (ValueError, TypeError, SyntaxError, EOFError, tokenize.TokenError) as e:  # NumPy parses it as Python
        raise CheckpointError(f"{where}: malformed .npy header ({e})") from None
    if dtype.hasobject:
        raise CheckpointError(f"{where}: holds Python objects, which cannot be read without pickle")
    if any(not isinstance(d, int) or d < 0 for d in shape):
        raise CheckpointError(f"{where}: impossible shape {shape}")
    return dtype, tuple(shape), bool(fortran), f.tell()


def _read_exactly(f: IO[bytes], nbytes: int, where: str) -> bytes:
    data = f.read(nbytes)
    if len(data) != nbytes:
        raise CheckpointError(f"{where}: truncated: {len(data)} of {nbytes} bytes")
    return data
