"""Array sources: the 1-D or 2-D arrays of a cells matrix, read by ranges of their first axis.

The pooling path of a file (:mod:`cytepool.io.anndata._direct`) reads ``data``, ``indices`` and
``indptr`` (or a dense ``X``) through one small interface, :class:`ArraySource`: ``shape``,
``dtype`` (native byte order), ``where`` (how messages name it) and ``read(start, stop)``, the
elements or rows ``[start, stop)``. One source per storage:

- an ``.h5ad`` dataset: :class:`H5DirectSource`, its stored chunks read with ``os.pread`` and
  decoded on the decode threads (:mod:`cytepool.io.anndata._hdf5`); or, for a filter that
  reader does not decode, :class:`H5Source`, through h5py (one thread at a time: h5py holds a
  global lock);
- a Zarr v2 array (what anndata < 0.13 writes): :class:`ZarrV2Source`, which reads each chunk
  file itself and decodes it with numcodecs (blosc, zstd, gzip, zlib, lz4 or none) on
  cytepool's decode threads, numcodecs' decoders releasing the GIL;
- a Zarr v3 array: :class:`ZarrV3Source`, cytepool's own Zarr reader (sharded included).

A source checks what it reads: a chunk that is not a regular file, is damaged, or decodes to
the wrong size raises :class:`~cytepool.errors.FormatError` naming the file, the array and the
chunk. Zarr v2 metadata this module does not read (filters, Fortran order, an unknown
compressor) makes :func:`zarr_v2_source` return the reason instead, and the caller falls back
to anndata's reader.
"""

from __future__ import annotations

import json
import math
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from cytepool.errors import FormatError, InputError, UnsupportedFeatureError
from cytepool.io.zarr import _threads
from cytepool.io.zarr.codecs import MAX_CHUNK_BYTES

if TYPE_CHECKING:
    import h5py

    from cytepool.io.anndata._hdf5 import DirectDataset

__all__ = [
    "ArraySource",
    "H5DirectSource",
    "H5Source",
    "ZarrV2Source",
    "ZarrV3Source",
    "check_v2_strings",
    "h5_source",
    "open_regular",
    "read_pair",
    "zarr_v2_source",
]

# Compressors of Zarr v2 decoded with numcodecs
_COMPRESSORS = frozenset({"blosc", "zstd", "gzip", "zlib", "lz4"})
# The largest stored chunk read: a chunk file larger than its decoded size plus this is damaged
_SLACK = 1 << 16


class ArraySource(Protocol):
    """A 1-D or 2-D array read by ranges of its first axis, in native byte order."""

    shape: tuple[int, ...]
    dtype: np.dtype[Any]
    where: str
    into: bool  # whether read decodes straight into a given ``out`` (else it copies there)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        """Elements (1-D) or rows (2-D) ``[start, stop)``: in ``out`` (a C-contiguous array of
        :attr:`dtype` and that shape) if given, else in a new array."""
        ...


def _check_range(source: ArraySource, start: int, stop: int) -> None:
    if not 0 <= start <= stop <= source.shape[0]:
        msg = f"{source.where}: cannot read [{start}, {stop}) of {source.shape[0]}"
        raise FormatError(msg)


def _out(
    source: ArraySource, start: int, stop: int, out: np.ndarray[Any, Any] | None
) -> np.ndarray[Any, Any]:
    """``out``, checked to fit ``[start, stop)`` of ``source``, or a new array for them."""
    shape = (stop - start, *source.shape[1:])
    if out is None:
        return np.empty(shape, dtype=source.dtype)
    if out.shape != shape or out.dtype != source.dtype or not out.flags.c_contiguous:
        msg = f"{source.where}: out must be a C-contiguous {source.dtype} array of {shape}"
        raise InputError(msg)
    return out


def _numeric(dtype: np.dtype[Any], where: str) -> np.dtype[Any]:
    """The native-order data type of stored numbers; others refused."""
    if dtype.kind not in "biuf" or dtype.itemsize > 8:
        msg = f"{where} holds {dtype} values; expected numbers"
        raise UnsupportedFeatureError(msg)
    return dtype.newbyteorder("=")


def open_regular(path: str | os.PathLike[str], where: str) -> int:
    """A file descriptor of ``path``, a regular file (never a FIFO, device or socket).

    Opened without blocking, so a FIFO does not wait for a writer; the caller closes it.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        msg = f"{where} is not a regular file ({path})"
        raise FormatError(msg)
    return fd


# --------------------------------------------------------------------------- HDF5


class H5Source:
    """A dataset of an ``.h5ad`` file, read through h5py (which converts the byte order)."""

    into = True

    def __init__(self, dataset: h5py.Dataset, where: str):
        self.dataset = dataset
        self.where = where
        self.shape = tuple(int(n) for n in dataset.shape)
        self.dtype = _numeric(np.dtype(dataset.dtype), where)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        _check_range(self, start, stop)
        out = _out(self, start, stop, out)
        if stop > start:
            try:
                self.dataset.read_direct(out, np.s_[start:stop])
            except (OSError, ValueError, TypeError) as error:
                msg = f"{self.where}: cannot read elements [{start}, {stop}): {error}"
                raise FormatError(msg) from error
        return out


class H5DirectSource:
    """A dataset of an ``.h5ad`` file read from its stored chunks, outside h5py
    (:class:`cytepool.io.anndata._hdf5.DirectDataset`)."""

    into = True

    def __init__(self, dataset: DirectDataset, where: str):
        self.dataset = dataset
        self.where = where
        self.shape = tuple(dataset.shape)
        self.dtype = _numeric(np.dtype(dataset.dtype), where)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        _check_range(self, start, stop)
        return self.dataset.read(start, stop, out=_out(self, start, stop, out))

    def close(self) -> None:
        self.dataset.close()


def h5_source(dataset: h5py.Dataset, path: Path, where: str) -> ArraySource:
    """A dataset of an ``.h5ad`` file: read directly where cytepool decodes its filters, else
    through h5py."""
    from cytepool.io.anndata._hdf5 import DirectDataset

    direct = DirectDataset.open(path, dataset.name)
    return H5DirectSource(direct, where) if direct is not None else H5Source(dataset, where)


def read_pair(
    first: ArraySource,
    second: ArraySource,
    start: int,
    stop: int,
    outs: tuple[np.ndarray[Any, Any] | None, np.ndarray[Any, Any] | None] = (None, None),
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``[start, stop)`` of two arrays (data and indices), read at once on the decode threads
    (into ``outs``, as ``out`` of :meth:`ArraySource.read`)."""
    if isinstance(first, H5DirectSource) and isinstance(second, H5DirectSource):
        from cytepool.io.anndata._hdf5 import read_together

        _check_range(first, start, stop)
        _check_range(second, start, stop)
        places = [_out(first, start, stop, outs[0]), _out(second, start, stop, outs[1])]
        requests = [(first.dataset, start, stop), (second.dataset, start, stop)]
        a, b = read_together(requests, places)
        return a, b
    results: list[Any] = [None, None]

    def run(i: int) -> None:
        results[i] = (first, second)[i].read(start, stop, outs[i])

    _threads.for_each(run, (0, 1))
    return results[0], results[1]


# --------------------------------------------------------------------------- Zarr v3


class ZarrV3Source:
    """A Zarr v3 array read by cytepool's own Zarr reader."""

    into = False  # cytepool.io.zarr makes its own array: an ``out`` is a copy

    def __init__(self, path: Path, where: str):
        from cytepool.io.zarr import open_array

        self.array = open_array(path)
        self.where = where
        self.shape = tuple(self.array.shape)
        self.dtype = _numeric(np.dtype(self.array.dtype), where)

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        _check_range(self, start, stop)
        values = np.asarray(self.array[start:stop], dtype=self.dtype)
        if out is None:
            return values
        out = _out(self, start, stop, out)
        out[...] = values
        return out


# --------------------------------------------------------------------------- Zarr v2


def zarr_v2_source(path: Path, where: str) -> ZarrV2Source | str:
    """The Zarr v2 array at ``path`` (its ``.zarray``), or why it is read the slow way.

    Raises FormatError for metadata that is not a valid Zarr v2 array.
    """
    document = _zarray(path, where)
    for key in ("shape", "chunks", "dtype"):
        if key not in document:
            msg = f"{where}: its .zarray lacks {key!r}"
            raise FormatError(msg)
    shape, chunks = _ints(document["shape"], 0, where), _ints(document["chunks"], 1, where)
    if len(shape) != len(chunks) or len(shape) not in (1, 2):
        msg = f"{where}: shape {shape} and chunks {chunks} of a 1-D or 2-D array expected"
        raise FormatError(msg)
    if document.get("filters"):
        return f"filters {[f.get('id') for f in document['filters']]}"
    if document.get("order", "C") != "C" and len(shape) > 1:
        return "Fortran order"
    compressor = document.get("compressor")
    if compressor is not None and compressor.get("id") not in _COMPRESSORS:
        return f"compressor {compressor.get('id')!r}"
    try:
        stored = np.dtype(document["dtype"])
    except (TypeError, ValueError) as error:
        msg = f"{where}: dtype {document['dtype']!r} is not a numpy data type"
        raise FormatError(msg) from error
    separator = document.get("dimension_separator", ".")
    if separator not in (".", "/"):
        msg = f"{where}: dimension_separator {separator!r}; expected '.' or '/'"
        raise FormatError(msg)
    fill = _fill(document.get("fill_value"), stored, where)
    return ZarrV2Source(path, where, (shape, chunks, stored), compressor, separator, fill)


def _zarray(path: Path, where: str) -> dict[str, Any]:
    fd = open_regular(path / ".zarray", f"{where} (.zarray)")
    try:
        with os.fdopen(fd, "rb") as file:
            document = json.loads(file.read(1 << 20))
    except (ValueError, UnicodeDecodeError) as error:
        msg = f"{where}: its .zarray is not valid JSON"
        raise FormatError(msg) from error
    if not isinstance(document, dict) or document.get("zarr_format") != 2:
        msg = f"{where}: its .zarray is not Zarr v2 array metadata"
        raise FormatError(msg)
    return document


def _ints(value: Any, low: int, where: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(
        isinstance(n, int) and not isinstance(n, bool) and n >= low for n in value
    ):
        msg = f"{where}: expected a list of integers >= {low} in its .zarray, found {value!r}"
        raise FormatError(msg)
    return tuple(value)


def _fill(value: Any, dtype: np.dtype[Any], where: str) -> Any:
    if value is None:
        return 0
    try:
        return np.array(value, dtype=dtype.newbyteorder("="))[()]
    except (TypeError, ValueError, OverflowError) as error:
        msg = f"{where}: fill_value {value!r} is not a {dtype}"
        raise FormatError(msg) from error


class ZarrV2Source:
    """A Zarr v2 array: chunk files read here, decoded with numcodecs on the decode threads.

    A whole blosc chunk of a 1-D array is decoded straight into the result. A chunk only
    partly read is kept decoded until the next read, which usually needs its rest (blocks of
    rows follow each other). Sizes are checked before anything is allocated: a chunk file
    larger than its chunk can need, a blosc header or a decoded chunk of the wrong size, a raw
    chunk of the wrong length are a FormatError naming the chunk.
    """

    into = True

    def __init__(
        self,
        path: Path,
        where: str,
        layout: tuple[tuple[int, ...], tuple[int, ...], np.dtype[Any]],
        compressor: dict[str, Any] | None,
        separator: str,
        fill: Any,
    ):
        self.path, self.where = path, where
        self.shape, self.chunks, self.stored = layout
        self.dtype = _numeric(self.stored, where)
        self.separator, self.fill = separator, fill
        self.codec = _codec(compressor, where)
        self.chunk_nbytes = math.prod(self.chunks) * self.stored.itemsize
        if self.chunk_nbytes > MAX_CHUNK_BYTES:
            msg = (
                f"{where}: chunks of {self.chunk_nbytes} bytes; at most {MAX_CHUNK_BYTES} are read"
            )
            raise UnsupportedFeatureError(msg)
        # chunks only partly read, decoded: those of the last read, and those of this one
        self._kept: dict[tuple[int, int], np.ndarray[Any, Any]] = {}
        self._keep: dict[tuple[int, int], np.ndarray[Any, Any]] = {}
        self._lock = threading.Lock()

    def read(
        self, start: int, stop: int, out: np.ndarray[Any, Any] | None = None
    ) -> np.ndarray[Any, Any]:
        _check_range(self, start, stop)
        out = _out(self, start, stop, out)
        if stop == start or 0 in self.shape:
            return out
        size = self.chunks[0]
        rows = range(start // size, (stop - 1) // size + 1)
        n_columns = -(-self.shape[1] // self.chunks[1]) if len(self.shape) == 2 else 1
        items = [(row, column) for row in rows for column in range(n_columns)]
        self._keep = {}
        _threads.for_each(lambda item: self._place(item, start, stop, out), items)
        self._kept, self._keep = self._keep, {}
        return out

    def _place(self, item: tuple[int, int], start: int, stop: int, out: np.ndarray) -> None:
        """Decode chunk ``item`` (row, column of the chunk grid) into its part of ``out``."""
        row, column = item
        size = self.chunks[0]
        first, last = row * size, min((row + 1) * size, self.shape[0])
        low, high = max(first, start), min(last, stop)
        target = out[low - start : high - start]
        if len(self.shape) == 2:
            width = self.chunks[1]
            target = target[:, column * width : (column + 1) * width]
        key = (row, column)
        with self._lock:
            chunk = self._kept.get(key)
        if chunk is None:
            coords = (row, column) if len(self.shape) == 2 else (row,)
            name = self.separator.join(map(str, coords))
            where = f"{self.where}, chunk {name}"
            encoded = self._encoded(self.path / name, where)
            if encoded is None:  # not stored: the fill value
                target[...] = self.fill
                return
            whole = low == first and high == last and (last - first) == size
            direct = whole and len(self.shape) == 1 and self.stored.isnative
            if direct and self.codec is not None and self.codec.codec_id == "blosc":
                _check_blosc_header(encoded, self.chunk_nbytes, where)  # straight into out
                self._call(lambda: self.codec.decode(encoded, out=target), where)
                return
            chunk = self._chunk(encoded, where)
            if not (low == first and high == last):  # the next read needs the rest
                with self._lock:
                    self._keep[key] = chunk
        piece = chunk[low - first : high - first]
        if len(self.shape) == 2:
            piece = piece[:, : target.shape[1]]
        target[...] = piece

    def _chunk(self, encoded: bytes, where: str) -> np.ndarray[Any, Any]:
        """A chunk decoded whole, in its shape and stored byte order; its size checked before
        anything is allocated for it."""
        if self.codec is None:
            decoded: Any = encoded
        elif self.codec.codec_id == "blosc":
            _check_blosc_header(encoded, self.chunk_nbytes, where)
            decoded = np.empty(self.chunk_nbytes, dtype=np.uint8)
            self._call(lambda: self.codec.decode(encoded, out=decoded), where)
        else:
            decoded = self._call(lambda: self.codec.decode(encoded), where)
        raw = np.frombuffer(memoryview(decoded).cast("B"), dtype=np.uint8)
        if raw.size != self.chunk_nbytes:
            msg = f"{where}: holds {raw.size} bytes decoded; expected {self.chunk_nbytes}"
            raise FormatError(msg)
        return raw.view(self.stored).reshape(self.chunks)

    def _call(self, decode: Callable[[], Any], where: str) -> Any:
        """``decode()``, its failures (numcodecs raises RuntimeError for blosc and zstd,
        EOFError, zlib.error, ValueError, ...) a FormatError naming the chunk."""
        try:
            return decode()
        except Exception as error:
            problem = f"{type(error).__name__}: {error}"
            msg = f"{where}: cannot decode it ({self.codec.codec_id}): {problem}"
            raise FormatError(msg) from error

    def _encoded(self, path: Path, where: str) -> bytes | None:
        """The stored bytes of a chunk, or None if it is not stored (the fill value)."""
        try:
            fd = open_regular(path, where)
        except FileNotFoundError:
            return None
        try:
            size = os.fstat(fd).st_size
            limit = self.chunk_nbytes + _SLACK + self.chunk_nbytes // 8
            if size > limit:
                msg = (
                    f"{where}: stores {size} bytes, more than a chunk of {self.chunk_nbytes} needs"
                )
                raise FormatError(msg)
            data = os.pread(fd, size, 0)
        finally:
            os.close(fd)
        if len(data) != size:
            msg = f"{where}: read {len(data)} of its {size} bytes"
            raise FormatError(msg)
        return data


def check_v2_strings(path: Path, where: str) -> None:
    """Check the chunks of the Zarr v2 array of strings at ``path`` (an obs or var column)
    before zarr-python reads them: numcodecs' ``vlen-utf8`` allocates as many strings as a
    chunk's first four bytes claim before it checks them (a damaged chunk claimed 4 billion:
    32 GiB). Each stored chunk must decode to its count of strings; a blosc frame's header
    must match the chunk file and claim at most what the strings can take. Arrays of
    anything else are left to zarr-python. Raises FormatError naming the chunk."""
    document = _zarray(path, where)
    filters = [f.get("id") if isinstance(f, dict) else f for f in document.get("filters") or []]
    if filters != ["vlen-utf8"]:
        return
    count = math.prod(_ints(document.get("chunks"), 1, where))
    codec = _codec(document.get("compressor"), where)
    chunks = (p for p in path.rglob("*") if not p.name.startswith(".") and not p.is_dir())
    for chunk in sorted(chunks):
        chunk_where = f"{where}, chunk {chunk.relative_to(path).as_posix()}"
        fd = open_regular(chunk, chunk_where)
        try:
            encoded = os.pread(fd, os.fstat(fd).st_size, 0)
        finally:
            os.close(fd)
        decoded: Any = encoded
        if codec is not None:
            if codec.codec_id == "blosc":  # its strings: a length each, and bytes
                claimed = int.from_bytes(encoded[4:8], "little") if len(encoded) >= 16 else 0
                most = 4 + 4 * count + 1024 * len(encoded)
                _check_blosc_header(encoded, min(max(claimed, 4 + 4 * count), most), chunk_where)
            decoded = _decoded(codec, encoded, chunk_where)
        raw = memoryview(decoded).cast("B")
        found = int.from_bytes(raw[:4], "little") if len(raw) >= 4 else None
        if found != count:
            msg = f"{chunk_where}: claims {found} strings; a chunk holds {count}"
            raise FormatError(msg)


def check_v3_strings(path: Path, where: str) -> None:
    """Check the Zarr v3 array of strings at ``path`` (an obs or var column) before
    zarr-python reads it: zarr-python decodes ``vlen-utf8`` with numcodecs too, which allocates
    as many strings as a chunk claims before it checks them. cytepool's own reader checks each
    chunk's count of strings against its shape first, so the strings are read with it once.
    Arrays of anything else, and arrays that reader does not support, are left to zarr-python.
    Raises FormatError naming the array and the chunk."""
    from cytepool.io.zarr import open_array

    try:
        array = open_array(path)
        if array.dtype.kind in "OTU":
            array[...]
    except UnsupportedFeatureError:
        return
    except FormatError as error:
        msg = f"{where}: {error}"
        raise FormatError(msg) from error


def _decoded(codec: Any, encoded: bytes, where: str) -> Any:
    try:
        return codec.decode(encoded)
    except Exception as error:
        msg = f"{where}: cannot decode it ({codec.codec_id}): {type(error).__name__}: {error}"
        raise FormatError(msg) from error


def _check_blosc_header(encoded: bytes, nbytes: int, where: str) -> None:
    """A blosc frame's header (16 bytes: its decoded and stored sizes) matches the chunk."""
    if len(encoded) < 16:
        msg = f"{where}: holds {len(encoded)} bytes, too few for a blosc frame"
        raise FormatError(msg)
    decoded = int.from_bytes(encoded[4:8], "little")
    stored = int.from_bytes(encoded[12:16], "little")
    if decoded != nbytes or stored != len(encoded):
        msg = (
            f"{where}: its blosc header claims {decoded} bytes stored in {stored}; expected "
            f"{nbytes} bytes stored in the {len(encoded)} of the chunk"
        )
        raise FormatError(msg)


def _codec(compressor: dict[str, Any] | None, where: str) -> Any:
    if compressor is None:
        return None
    try:
        from numcodecs import get_codec
    except ImportError as error:  # pragma: no cover - numcodecs comes with zarr
        msg = f"{where}: decoding Zarr v2 chunks needs numcodecs (pip install numcodecs)"
        raise UnsupportedFeatureError(msg) from error
    try:
        return get_codec(dict(compressor))
    except (TypeError, ValueError, KeyError) as error:
        msg = f"{where}: compressor {compressor!r} is not valid: {error}"
        raise FormatError(msg) from error
