"""String columns as UTF-8 buffers, written and read chunk by chunk without Python strings.

A string array of a table is stored exactly as :func:`cytepool.io.zarr.write_array` stores it
(``vlen-utf8`` chunks of the same size, the last one padded with ``""``, chunks of only ``""``
not stored), but the chunks are encoded here from the column's bytes:

* :class:`Utf8Strings` holds a column as Arrow-style buffers (offsets and UTF-8 bytes),
  taken without a copy from a polars or pyarrow column, and is what reads for polars and
  pyarrow return: chunks decode straight into such buffers, which become an Arrow array
  (``pyarrow.Array.from_buffers``), so no Python ``str`` is made for a row;
* :class:`RowNumbers` makes the unnamed index of row numbers, chunk by chunk, from the
  digits of the numbers;
* numpy arrays of ``str`` (what pandas holds) are encoded a chunk at a time.

:func:`write_strings` lets ``write_array`` check the arguments and write the metadata (of an
empty array), stores the chunks, then gives zarr.json the array's length; :func:`read_strings`
reads the chunks with the Zarr module's chunk reader, every check included.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import numpy as np

from cytepool.errors import InputIndexError, InputTypeError
from cytepool.io import zarr as _zarr
from cytepool.io.zarr import _vlen
from cytepool.io.zarr._reading import Reader
from cytepool.io.zarr.array import array_handle
from cytepool.io.zarr.indexing import ChunkPiece, parse_selection
from cytepool.io.zarr.metadata import dumps
from cytepool.io.zarr.store import StoreHandle

__all__ = ["RowNumbers", "StringRows", "Utf8Strings", "decimal", "read_strings", "write_strings"]

_OBJECT = np.dtype(object)
_INT32_MAX = np.iinfo(np.int32).max


class StringRows:
    """A 1-D string column that encodes its own ``vlen-utf8`` chunks.

    It has the ``shape``, ``ndim`` and ``dtype`` (object) of a numpy array of ``str``, and
    ``rows[a:b]`` gives those rows as one, for code that needs the strings themselves.
    """

    dtype = _OBJECT
    ndim = 1

    def __init__(self, length: int):
        self.shape = (length,)

    def __len__(self) -> int:
        return self.shape[0]

    def __getitem__(self, key: slice) -> np.ndarray:
        start, stop, step = key.indices(self.shape[0])
        if step != 1:
            msg = f"{type(self).__name__} takes slices with step 1, found {key!r}"
            raise InputIndexError(msg)
        stop = max(start, stop)
        lengths, body = self.utf8(start, stop)
        return _strings(lengths, body)

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        raise NotImplementedError

    def chunk(self, start: int, stop: int, count: int) -> np.ndarray:
        """The vlen-utf8 chunk (uint8) of rows ``[start, stop)``, padded to ``count`` items."""
        lengths, body = self.utf8(start, stop)
        return _vlen.assemble(lengths, body, count)


def _strings(lengths: np.ndarray, body: np.ndarray) -> np.ndarray:
    """An object array of the str whose UTF-8 is ``body``, cut at ``lengths``."""
    payload = bytearray(_vlen.assemble(lengths, body).tobytes())
    decoder = _vlen.Decoder(len(lengths), "(in memory)")
    decoder.feed(payload)
    return decoder.finish(objects=True)


class Utf8Strings(StringRows):
    """A string column as Arrow-style buffers: ``offsets`` (n + 1 int32 or int64) into ``data``.

    Missing values, if any, are ``""`` here; their mask is kept with the column.
    """

    def __init__(self, offsets: np.ndarray, data: np.ndarray):
        super().__init__(len(offsets) - 1)
        self.offsets = offsets
        self.data = data

    @classmethod
    def from_arrow(cls, array: Any) -> Utf8Strings:
        """Take the buffers of a pyarrow string, large_string or string_view array (or a
        chunked one); missing values become ``""``."""
        import pyarrow as pa
        import pyarrow.compute as pc

        if isinstance(array, pa.ChunkedArray):
            array = array.combine_chunks() if array.num_chunks != 1 else array.chunk(0)
        if not (pa.types.is_string(array.type) or pa.types.is_large_string(array.type)):
            array = array.cast(pa.large_string())
        if array.null_count:
            array = pc.fill_null(array, "")
        n = len(array)
        offset_dtype = np.int32 if pa.types.is_string(array.type) else np.int64
        _, offsets, data = array.buffers()
        if offsets is None:  # an empty array may have no buffers
            return cls(np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.uint8))
        positions = np.frombuffer(offsets, dtype=offset_dtype)[array.offset : array.offset + n + 1]
        values = np.zeros(0, np.uint8) if data is None else np.frombuffer(data, dtype=np.uint8)
        return cls(positions, values)

    @classmethod
    def from_parts(cls, parts: list[tuple[np.ndarray, np.ndarray]]) -> Utf8Strings:
        """The column of pieces ``(lengths, utf8)`` in order; ``parts`` is emptied as the
        pieces are copied, so that each is freed once copied."""
        n = sum(len(lengths) for lengths, _ in parts)
        size = sum(len(body) for _, body in parts)
        offsets = np.empty(n + 1, dtype=np.int32 if size <= _INT32_MAX else np.int64)
        data = np.empty(size, dtype=np.uint8)
        offsets[0] = row = position = 0
        parts.reverse()
        while parts:
            lengths, body = parts.pop()
            stop = row + len(lengths)
            segment = offsets[row + 1 : stop + 1]
            np.cumsum(lengths, out=segment)
            np.add(segment, position, out=segment)
            data[position : position + len(body)] = body
            row, position = stop, position + len(body)
        return cls(offsets, data)

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        offsets = self.offsets[start : stop + 1]
        if not len(offsets):
            return np.zeros(0, dtype=np.int64), self.data[:0]
        return np.diff(offsets), self.data[offsets[0] : offsets[-1]]

    def to_arrow(self, mask: np.ndarray | None = None) -> Any:
        """A pyarrow ``string`` array (``large_string`` beyond 2 GiB), null where ``mask``."""
        import pyarrow as pa

        n = len(self)
        base = int(self.offsets[0]) if n else 0
        end = int(self.offsets[-1]) if n else 0
        data = self.data[base:end]
        offsets = self.offsets - base if base else self.offsets
        if end - base > _INT32_MAX:
            kind, offsets = pa.large_string(), offsets.astype(np.int64, copy=False)
        else:
            kind, offsets = pa.string(), offsets.astype(np.int32, copy=False)
        validity, nulls = None, 0
        if mask is not None and mask.any():
            validity = pa.py_buffer(np.packbits(~mask, bitorder="little"))
            nulls = int(mask.sum())
        buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
        return pa.Array.from_buffers(kind, n, buffers, null_count=nulls)


class RowNumbers(StringRows):
    """The row numbers ``start, start + step, ...`` as decimal strings, made from digits."""

    def __init__(self, length: int, start: int = 0, step: int = 1):
        super().__init__(length)
        self.start, self.step = start, step

    def utf8(self, start: int, stop: int) -> tuple[np.ndarray, np.ndarray]:
        """The byte length of each row in ``[start, stop)`` and their UTF-8 joined."""
        first = self.start + start * self.step
        return decimal(np.arange(first, first + (stop - start) * self.step, self.step))


def decimal(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The decimal strings of int64 ``values`` as ASCII: the length of each and the digits.

    Examples
    --------
    >>> lengths, body = decimal(np.array([0, 7, -12, 305]))
    >>> lengths.tolist(), body.tobytes()
    ([1, 1, 3, 3], b'07-12305')
    """
    values = np.asarray(values, dtype=np.int64)
    negative = values < 0
    magnitude = values.astype(np.uint64)
    np.negative(magnitude, out=magnitude, where=negative)  # modulo 2**64: |int64 min| fits
    digits = np.ones(len(values), dtype=np.int64)
    for power in range(1, 20):
        above = magnitude >= np.uint64(10**power)
        if not above.any():
            break
        digits += above
    lengths = digits + negative
    ends = np.cumsum(lengths)
    body = np.empty(int(ends[-1]) if len(ends) else 0, dtype=np.uint8)
    body[(ends - lengths)[negative]] = ord("-")
    positions = ends - 1
    fewest = int(np.min(digits)) if len(digits) else 0
    for k in range(int(np.max(digits)) if len(digits) else 0):
        if k >= fewest:  # only the numbers with more than k digits
            keep = digits > k
            magnitude, positions, digits = magnitude[keep], positions[keep], digits[keep]
        quotient = magnitude // np.uint64(10)
        body[positions] = (magnitude - quotient * np.uint64(10)).astype(np.uint8) + ord("0")
        magnitude, positions = quotient, positions - 1
    return lengths, body


# --------------------------------------------------------------------------------------------
# Writing


def write_strings(
    path: Path,
    data: Any,
    *,
    chunks: int,
    compression: str | None,
    level: int | None,
    attributes: dict[str, Any],
) -> None:
    """Store a 1-D string column as ``write_array`` would, encoding the chunks from ``data``.

    ``data`` is a :class:`StringRows`, a numpy array of ``str``, or any object whose
    ``data[a:b]`` gives those rows as one (``columns.LazyRows``). ``write_array`` checks the
    arguments and makes the directory and the metadata, of an empty array; each chunk that
    holds a non-empty string is then encoded, compressed with the array's codecs and stored
    under its key, and zarr.json is rewritten last with the array's length.
    """
    n = len(data)
    _zarr.write_array(
        path,
        np.empty(0, dtype=object),
        chunks=(chunks,),
        compression=compression,
        level=level,
        attributes=attributes,
    )
    meta = _zarr.open_array(path).metadata
    made: set[Path] = set()
    for index, start in enumerate(range(0, n, chunks)):
        stop = min(start + chunks, n)
        if isinstance(data, StringRows):
            chunk = data.chunk(start, stop, chunks)
        else:
            chunk = _vlen.payload(np.asarray(data[start:stop]), chunks)
        if len(chunk) == 4 + 4 * chunks:  # only "": the fill value, not stored
            continue
        target = path / meta.chunk_key_encoding.encode((index,))
        if target.parent not in made:
            target.parent.mkdir(parents=True, exist_ok=True)
            made.add(target.parent)
        encoded = meta.codecs.compress(chunk.data)
        with open(target, "xb") as file:
            file.write(encoded)
    document = dumps(dataclasses.replace(meta, shape=(n,)).to_json())
    (path / _zarr.METADATA_FILE).write_text(document, encoding="ascii")


# --------------------------------------------------------------------------------------------
# Reading


def read_strings(array: _zarr.ZarrArray) -> Utf8Strings:
    """Read a whole 1-D string array into buffers, checked as every read of the Zarr module.

    Chunks that are not stored read as ``""``.
    """
    with array_handle(array) as handle:
        reader = _BufferReader(handle, array)
        selection = parse_selection(..., array.shape, orthogonal=False)
        reader.read(selection, np.empty(0, dtype=object))
    reader.pieces.sort(key=lambda piece: piece[0])
    parts = [(lengths, body) for _, lengths, body in reader.pieces]
    reader.pieces.clear()
    return Utf8Strings.from_parts(parts)


class _BufferReader(Reader):
    """The Zarr module's chunk reader, keeping decoded string chunks as buffers."""

    def __init__(self, handle: StoreHandle, array: _zarr.ZarrArray):
        super().__init__(handle, array.key, array.metadata, objects=False)
        self.pieces: list[tuple[int, np.ndarray, np.ndarray]] = []

    def _fill(self, piece: ChunkPiece, work: np.ndarray) -> None:
        start, stop = _bounds(piece.out_sel)
        self.pieces.append((start, np.zeros(stop - start, np.int32), np.zeros(0, np.uint8)))

    def _decode_strings(self, source: Any, piece: ChunkPiece, work: np.ndarray) -> None:
        lengths, body = self._string_decoder(source).buffers()
        a, b = _bounds(piece.chunk_sel)
        if (a, b) != (0, len(lengths)):
            skipped = int(lengths[:a].sum())
            lengths = lengths[a:b]
            body = body[skipped : skipped + int(lengths.sum())]
        # a chunk holds less than 2 GiB (MAX_CHUNK_BYTES): its lengths fit in int32
        self.pieces.append((_bounds(piece.out_sel)[0], lengths.astype(np.int32), body))


def _bounds(selection: Any) -> tuple[int, int]:
    (axis,) = selection
    if not isinstance(axis, slice) or axis.step not in (None, 1):
        msg = f"a string column is read in slices of rows, found {axis!r}"
        raise InputTypeError(msg)
    return axis.start, axis.stop
