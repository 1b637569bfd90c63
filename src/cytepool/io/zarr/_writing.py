"""Writing chunks: one row of chunks at a time, padded, encoded, fill-valued chunks skipped."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from cytepool.errors import InputError, InputTypeError
from cytepool.io.zarr import _vlen, indexing
from cytepool.io.zarr._threads import for_each
from cytepool.io.zarr._vlen import invalid_unicode
from cytepool.io.zarr.codecs import MAX_CHUNK_BYTES
from cytepool.io.zarr.data_types import DataType
from cytepool.io.zarr.metadata import ArrayMetadata

__all__ = ["NAT", "Payload", "string_rows", "write_chunks", "write_payloads"]

NAT = np.iinfo(np.int64).min


def write_chunks(directory: Path, data: Any, meta: ArrayMetadata, dtype: np.dtype[Any]) -> None:
    """Write the chunks of ``data`` (of ``dtype``) under ``directory``, one row at a time.

    The chunks of a row are encoded and stored a few at a time (see ``_threads``); the next
    row is read once they are all stored.
    """
    writer = _ChunkWriter(directory, meta)
    for row in _rows_of_regions(data, meta, dtype):
        for_each(writer.write, row)


Payload = Callable[[int, _vlen.ChunkLimit], np.ndarray[Any, Any]]
"""Makes the vlen-utf8 encoding (uint8) of a chunk of a 1-D string array: given its index and
its limit, which it checks before it assembles the encoding (:func:`_vlen.assemble`)."""


def write_payloads(directory: Path, meta: ArrayMetadata, payload: Payload) -> None:
    """Store the encoded chunks (``array -> bytes`` codec applied) of a 1-D string array.

    ``payload`` makes each chunk's encoding, refusing one larger than MAX_CHUNK_BYTES; each is
    compressed with the array's codecs and stored under its key, a few at a time (see
    ``_threads``). The payloads are made in order as they are taken, so at most about one per
    thread is held. A payload equal to the fill value is not stored.
    """
    writer = _ChunkWriter(directory, meta)
    count = indexing.grid_shape(meta.shape, meta.chunk_grid.chunk_shape)[0]
    made = ((index, payload(index, writer.limit((index,)))) for index in range(count))
    for_each(writer.write_payload, made)


Region = tuple[tuple[int, ...], np.ndarray[Any, Any]]


def _rows_of_regions(
    data: Any, meta: ArrayMetadata, dtype: np.dtype[Any]
) -> Iterator[Iterator[Region]]:
    """For each row of chunks along the first axis, its chunks (read when first needed)."""
    if not meta.shape:
        yield iter([((), _rows(data, None, (), meta.data_type, dtype))])
        return
    grid = indexing.grid_shape(meta.shape, meta.chunk_grid.chunk_shape)
    for row in range(grid[0]):
        yield _row_regions(data, row, grid, meta, dtype)


def _row_regions(
    data: Any, row: int, grid: tuple[int, ...], meta: ArrayMetadata, dtype: np.dtype[Any]
) -> Iterator[Region]:
    """The chunks of one row along the first axis (only this row is read)."""
    shape, chunks = meta.shape, meta.chunk_grid.chunk_shape
    start, stop = row * chunks[0], min((row + 1) * chunks[0], shape[0])
    block = _rows(data, (start, stop), (stop - start, *shape[1:]), meta.data_type, dtype)
    for rest in itertools.product(*(range(g) for g in grid[1:])):
        region = tuple(
            slice(c * k, min((c + 1) * k, n))
            for c, k, n in zip(rest, chunks[1:], shape[1:], strict=True)
        )
        yield (row, *rest), block[(slice(None), *region)]


def _rows(
    data: Any,
    bounds: tuple[int, int] | None,
    shape: tuple[int, ...],
    data_type: DataType,
    dtype: np.dtype[Any],
) -> np.ndarray[Any, Any]:
    block = data[...] if bounds is None else data[bounds[0] : bounds[1]]
    if isinstance(block, np.ma.MaskedArray):
        msg = f"data gave rows {bounds} as a numpy masked array"
        raise InputTypeError(msg)
    block = np.asarray(block)
    if block.shape != shape:
        msg = f"data gave rows {bounds} of shape {block.shape}, expected {shape}"
        raise InputError(msg)
    if data_type.is_string:
        return string_rows(block, bounds)
    if block.dtype.newbyteorder("=") != dtype.newbyteorder("="):
        msg = f"data gave rows {bounds} of dtype {block.dtype}, expected {dtype}"
        raise InputError(msg)
    return block


def string_rows(block: np.ndarray[Any, Any], bounds: Any) -> np.ndarray[Any, Any]:
    """``block``, rows ``bounds`` of strings to write, if it holds strings: numpy's, or
    ``str`` objects (InputTypeError naming the first other object)."""
    if block.dtype.kind not in "TUO":
        msg = f"data gave rows {bounds} of dtype {block.dtype}, expected strings"
        raise InputError(msg)
    if block.dtype.kind == "O":
        values = block.ravel().tolist()
        try:
            "".join(values)  # fast check that every value is a str
        except TypeError:
            bad = next(v for v in values if not isinstance(v, str))
            msg = f"an object array to write as strings holds a {type(bad).__name__}: {bad!r}"
            raise InputTypeError(msg) from None
    return block


class _ChunkWriter:
    """Pads, encodes and stores chunks, skipping those equal to the fill value."""

    def __init__(self, directory: Path, meta: ArrayMetadata):
        self.directory, self.meta = directory, meta
        self.chunks = meta.chunk_grid.chunk_shape
        self.made: set[Path] = {directory}

    def write(self, item: Region) -> None:
        """Encode a chunk and store it in its new file, unless it equals the fill value."""
        coords, region = item
        try:
            self._write(coords, region)
        except UnicodeEncodeError:  # a str holds a lone surrogate
            first = tuple(c * k for c, k in zip(coords, self.chunks, strict=True))
            raise invalid_unicode(str(self.directory), region, first) from None

    def _write(self, coords: tuple[int, ...], region: np.ndarray[Any, Any]) -> None:
        chunk = self._pad(region)
        if self.meta.data_type.is_string:
            values = chunk.ravel(order="C")
            payload = _vlen.payload(values, limit=self.limit(coords))
            if len(payload) > 4 + 4 * values.size:  # else only "": the fill value, not stored
                self._store(coords, self.meta.codecs.compress(payload.data))
            return
        raw = self.meta.codecs.array_bytes.encode(chunk)  # type: ignore[union-attr]
        if self._is_fill(raw):
            return
        self._store(coords, self.meta.codecs.compress(raw))

    def limit(self, coords: tuple[int, ...]) -> _vlen.ChunkLimit:
        """The limit of the vlen-utf8 encoding of a string chunk: MAX_CHUNK_BYTES, the largest
        chunk cytepool reads (looked up at each call, so a test can lower it)."""
        key = self.meta.chunk_key_encoding.encode(coords)
        return _vlen.ChunkLimit(MAX_CHUNK_BYTES, f"{key} of the Zarr array {self.directory}")

    def write_payload(self, item: tuple[int, np.ndarray[Any, Any]]) -> None:
        """Compress and store the encoded chunk ``index`` of a 1-D array, unless it is fill."""
        index, payload = item
        if self.meta.data_type.is_string and len(payload) == 4 + 4 * self.chunks[0]:
            return  # only "": the fill value, not stored
        self._store((index,), self.meta.codecs.compress(payload.data))

    def _store(self, coords: tuple[int, ...], encoded: bytes | bytearray | memoryview) -> None:
        path = self.directory / self.meta.chunk_key_encoding.encode(coords)
        if path.parent not in self.made:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.made.add(path.parent)  # set.add is atomic under the GIL
        with open(path, "xb") as file:
            file.write(encoded)

    def _pad(self, region: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        if region.shape == self.chunks:
            return region
        dtype = np.dtypes.StringDType() if self.meta.data_type.is_string else region.dtype
        chunk = np.full(self.chunks, self.meta.fill_value, dtype=dtype)
        chunk[tuple(slice(0, n) for n in region.shape)] = region
        return chunk

    def _is_fill(self, raw: bytes | memoryview) -> bool:
        data_type = self.meta.data_type
        if data_type.is_string:
            return False
        if data_type.is_time:
            return bool(np.all(np.frombuffer(raw, dtype="<i8") == NAT))
        return not np.frombuffer(raw, dtype=np.uint8).any()
