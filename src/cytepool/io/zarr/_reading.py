"""Reading chunks into a preallocated result: sources, sinks and the chunk reader.

A read allocates its result once, then fetches the chunks it needs through one store handle
(see :mod:`cytepool.io.zarr.store`) and decodes each of them once, a few at a time on the
shared pool of ``_threads``, as the chunk plan is walked (no record per chunk is kept):
straight into the result when a whole chunk fills a C-contiguous block of it or a block whose
rows are contiguous, otherwise into a reusable chunk buffer of the decoding thread that is then
copied into place. An uncompressed chunk that fills such a block is read from a local store
straight into it, with no chunk buffer and no bytes object at all (unless its place in memory
makes that slow: see :data:`_SKEW`). A read of many chunks of a local store first lists the
chunk directory once (see :mod:`cytepool.io.zarr._stored`), fills the result with the fill
value, and reads only the chunks found. Chunks cover disjoint parts of
the result, so the threads never write to the same element.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from cytepool.errors import FormatError, InputTypeError, RemoteStoreError
from cytepool.io.zarr._stored import LIST_FROM, coordinates, stored_chunks
from cytepool.io.zarr._threads import for_each
from cytepool.io.zarr._vlen import Decoder, spaced
from cytepool.io.zarr.codecs import (
    MAX_CHUNK_BYTES,
    PIECE_BYTES,
    BytesCodec,
    ShardingCodec,
)
from cytepool.io.zarr.indexing import ChunkPiece, Selection, as_index
from cytepool.io.zarr.metadata import ArrayMetadata
from cytepool.io.zarr.sharding import WholeShard, packed_shard_bytes, read_shard_index
from cytepool.io.zarr.store import RangesRefusedError, StoreHandle, TooLargeError, join

__all__ = ["Reader"]

_KEEP_BYTES = 16 * 2**20
"""Chunk buffers up to this size stay with their decoding thread for later reads."""

_STATED_BYTES = 2**20
_STATED_RATIO = 64
"""A string chunk is decoded in one step if it states a decoded size of at most the larger of
``_STATED_BYTES`` and ``_STATED_RATIO`` times its own size (else it is streamed)."""

_buffers = threading.local()  # each thread's chunk buffer, kept across reads


class _Source:
    """The encoded bytes of one chunk, handed to the decoders in pieces of PIECE_BYTES."""

    def __init__(self, data: bytes | bytearray, where: str):
        self.data, self.size, self.where = data, len(data), where

    def take(self) -> bytes | bytearray:
        """The bytes, given away: the source no longer holds them (so that whoever takes them
        can let them go as soon as it is done with them)."""
        data, self.data = self.data, b""
        return data

    def pieces(self) -> Iterator[memoryview]:
        view = memoryview(self.data)
        for start in range(0, self.size, PIECE_BYTES):
            yield view[start : start + PIECE_BYTES]


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


class _FlatSink:
    """Decoded bytes go into a C-contiguous array, in order."""

    def __init__(self, array: np.ndarray[Any, Any]):
        self.bytes = array.reshape(-1).view(np.uint8)  # numpy copies release the GIL
        self.size, self.pos = len(self.bytes), 0

    def write(self, piece: bytes | memoryview) -> None:
        end = self.pos + len(piece)
        self.bytes[self.pos : end] = np.frombuffer(piece, dtype=np.uint8)
        self.pos = end


class _RowSink:
    """Decoded bytes go into the rows (contiguous last axis) of a strided view, in C order."""

    def __init__(self, rows: np.ndarray[Any, Any]):
        self.rows = rows  # uint8, shape (n_rows, bytes per row)
        self.width = rows.shape[1]
        self.size, self.pos = rows.size, 0

    def write(self, piece: bytes | memoryview) -> None:
        data = np.frombuffer(piece, dtype=np.uint8)
        row, col = divmod(self.pos, self.width)
        done = 0
        if col:
            done = min(self.width - col, len(data))
            self.rows[row, col : col + done] = data[:done]
            row += 1
        whole = (len(data) - done) // self.width
        if whole:
            end = done + whole * self.width
            self.rows[row : row + whole] = data[done:end].reshape(whole, self.width)
            row, done = row + whole, end
        if done < len(data):
            self.rows[row, : len(data) - done] = data[done:]
        self.pos += len(data)


def _thread_buffer(nbytes: int) -> np.ndarray[Any, Any]:
    """``nbytes`` bytes of the calling thread's chunk buffer (reused by every later read, which
    saves faulting in fresh pages per chunk), or fresh bytes beyond :data:`_KEEP_BYTES`."""
    if nbytes > _KEEP_BYTES:
        return np.empty(nbytes, dtype=np.uint8)
    buffer: np.ndarray[Any, Any] | None = getattr(_buffers, "scratch", None)
    if buffer is None or len(buffer) < nbytes:
        buffer = _buffers.scratch = np.empty(nbytes, dtype=np.uint8)
    return buffer[:nbytes]


class _RowsDone:
    """Calls ``callback(start, stop)`` once every chunk of rows ``start:stop`` (along the first
    axis) of a whole read has been decoded, on the thread that decoded the last of them.

    With ``stored`` (the positions in the chunk grid of the only chunks the read decodes, the
    rest of the result being filled first), a band of rows waits for those of its chunks only.
    """

    def __init__(
        self,
        shape: Sequence[int],
        chunks: Sequence[int],
        callback: Callable[..., Any],
        stored: np.ndarray[Any, Any] | None = None,
    ):
        self.rows, self.step, self.callback = shape[0], chunks[0], callback
        bands = -(-self.rows // self.step)
        per_row = math.prod(-(-n // c) for n, c in zip(shape[1:], chunks[1:], strict=True))
        if stored is None:
            self.left = [per_row] * bands
        else:
            self.left = np.bincount(stored // max(per_row, 1), minlength=bands).tolist()
        self.lock = threading.Lock()

    def done(self, index: int) -> None:
        with self.lock:
            self.left[index] -= 1
            last = self.left[index] == 0
        if last:
            start = index * self.step
            self.callback(start, min(start + self.step, self.rows))

    def without_chunks(self) -> None:
        """Rows with no chunk to decode (another axis has length 0, or none of their chunks is
        stored) are done at once, each run of them in one call."""
        start = -1
        for band, left in enumerate([*self.left, 1]):
            if left == 0 and start < 0:
                start = band
            elif left and start >= 0:
                self.callback(start * self.step, min(band * self.step, self.rows))
                start = -1


_LEAST_ROW_BYTES = 512
"""A chunk whose rows (in the result) are shorter than this is read and copied into place rather
than read straight into it a row at a time."""

_PAGE, _SKEW = 4096, 64
"""On some processors (AMD Zen) the kernel copies a file into memory many times slower when
the destination lies 1 to 63 bytes past the source's offset within a 4 KiB page (measured: 11 ms
instead of 0.5 ms for 8 MiB). A large numpy array starts 16 bytes into a page, so a chunk read
straight into it would land there; such a chunk is read whole and copied instead."""


def _straight_buffers(target: np.ndarray[Any, Any]) -> list[memoryview] | None:
    """The bytes of ``target`` as writable buffers in C order, to read a chunk file straight
    into: one if it is C-contiguous, one per row if only its rows are (rows of at least
    :data:`_LEAST_ROW_BYTES`); None if neither, or if a copy into them would be slow (see
    :data:`_SKEW`)."""
    if target.flags.c_contiguous:
        rows = target.reshape(1, -1).view(np.uint8)
    elif target.ndim < 2 or target.strides[-1] != target.itemsize:
        return None
    else:
        try:
            rows = np.reshape(target, (-1, target.shape[-1]), copy=False).view(np.uint8)
        except (ValueError, TypeError):
            return None
    width = rows.shape[1]
    if len(rows) > 1 and width < _LEAST_ROW_BYTES:
        return None
    # where each row lands in memory, less where it starts in the file, within a page
    step = rows.strides[0] - width
    skew = (rows.ctypes.data + np.arange(len(rows), dtype=np.int64) * step) % _PAGE
    if ((skew > 0) & (skew < _SKEW)).any():
        return None
    return [memoryview(row) for row in rows]


def _sink(target: np.ndarray[Any, Any]) -> Any:
    """A sink that decodes straight into ``target``, or None if its layout does not allow it."""
    if target.flags.c_contiguous:
        return _FlatSink(target)
    if target.ndim < 2 or target.strides[-1] != target.itemsize:
        return None
    try:
        rows = np.reshape(target, (-1, target.shape[-1]), copy=False)
    except (ValueError, TypeError):
        return None
    return _RowSink(rows.view(np.uint8))


class Reader:
    """Decodes the chunks of one read, fetched through ``handle``, into the preallocated result.

    ``key`` is the array's key in the store (``""`` for the store's root). With ``pieces`` (a
    list; 1-D string arrays read in slices only), string chunks are not made into strings:
    each selected part of a chunk is appended as ``(first row, byte lengths, UTF-8 bytes)``,
    or, with ``spaced`` and an array of one chunk, as ``(first row, None, SpacedUtf8Buffer)``:
    the items left where the chunk holds them, joined when first used (and a whole chunk
    decoded in one piece not even parsed until its lengths are needed).
    """

    def __init__(
        self,
        handle: StoreHandle,
        key: str,
        meta: ArrayMetadata,
        *,
        objects: bool = False,
        pieces: list[tuple[int, np.ndarray[Any, Any] | None, Any]] | None = None,
        spaced: bool = False,
    ):
        self.handle, self.key, self.meta, self.objects = handle, key, meta, objects
        self.pieces = pieces
        self.fill = str(meta.fill_value) if objects else meta.fill_value
        head = meta.codecs.array_bytes
        self.shard = head if isinstance(head, ShardingCodec) else None
        self.chain = head.codecs if isinstance(head, ShardingCodec) else meta.codecs
        self.chunk_shape = self.shard.chunk_shape if self.shard else meta.chunk_grid.chunk_shape
        self.data_type = meta.data_type
        self.count = math.prod(self.chunk_shape)
        one_chunk = len(meta.shape) == 1 and meta.shape[0] <= self.chunk_shape[0]
        self.spaced = spaced and pieces is not None and one_chunk
        string = self.data_type.is_string
        self.nbytes = MAX_CHUNK_BYTES if string else self.count * self.data_type.itemsize
        self.max_encoded = self.chain.limits(self.nbytes)[-1]
        array_bytes = self.chain.array_bytes
        self.stored = (
            array_bytes.stored_dtype(self.data_type.dtype)
            if isinstance(array_bytes, BytesCodec)
            else None
        )
        # a local store reads whole files straight into place (a remote one has no such thing)
        self.read_into = getattr(getattr(handle, "inner", handle), "read_into", None)

    @property
    def exact(self) -> bool:
        """Whether a stored chunk has exactly ``nbytes`` bytes (fixed-size, uncompressed)."""
        return self.stored is not None and not self.chain.compressors

    @property
    def chunk_limit(self) -> int:
        """The most bytes a stored chunk (not a shard) can have: exactly its size if it is
        uncompressed, else the most any valid encoding of it takes; a store's object larger than
        that is refused from its length, unread (a remote one before its body is fetched)."""
        return self.nbytes if self.exact else self.max_encoded

    @property
    def _shard_shape(self) -> tuple[int, ...]:
        return self.meta.chunk_grid.chunk_shape

    def read(
        self,
        selection: Selection,
        work: np.ndarray[Any, Any],
        on_rows: Callable[[int, int], object] | None = None,
    ) -> None:
        """Decode the selected chunks into ``work``; with ``on_rows`` (a whole read only), call
        ``on_rows(start, stop)`` on a decoding thread as soon as rows ``start:stop`` are in."""
        only = None if self.shard or on_rows else selection.only_piece(self.chunk_shape)
        if only is not None:  # an array of one chunk, read whole: no plan, no pool
            self._read_file_chunk(only, work)
            return
        grid = self.chunk_shape if self.shard is None else self._shard_shape
        stored = self._stored(selection, grid)
        rows = None if on_rows is None else _RowsDone(self.meta.shape, grid, on_rows, stored)
        if stored is not None:
            work[...] = self.fill  # every chunk not stored, at once
        if rows is not None:
            rows.without_chunks()

        def read_chunk(piece: ChunkPiece) -> None:
            self._read_file_chunk(piece, work)
            if rows is not None:
                rows.done(piece.coords[0])

        def read_shard(shard: tuple[tuple[int, ...], Iterator[tuple[int, ChunkPiece]]]) -> None:
            self._read_shard(shard[0], shard[1], work)
            if rows is not None:
                rows.done(shard[0][0])

        counts = _grid(self.meta.shape, grid)
        found = None if stored is None else coordinates(stored, counts)
        if self.shard is None:
            pieces = (
                selection.pieces(self.chunk_shape)
                if found is None
                else selection.pieces_at(self.chunk_shape, found)
            )
            for_each(read_chunk, pieces)
            return
        shape, inner = self._shard_shape, self.chunk_shape
        shards = (
            selection.shards(shape, inner)
            if found is None
            else selection.shards_at(shape, inner, found)
        )
        for_each(read_shard, shards)

    def _stored(self, selection: Selection, grid: tuple[int, ...]) -> np.ndarray[Any, Any] | None:
        """The chunks (shards) stored, as positions in the grid, if one listing found fewer than
        the read needs (see :mod:`cytepool.io.zarr._stored`); None to look each of them up."""
        if self.pieces is not None or _most_chunks(selection, self.meta.shape, grid) < LIST_FROM:
            return None  # too few chunks to be worth a listing, told without planning each axis
        needed = selection.count(grid)
        stored = stored_chunks(
            self.handle, self.key, self.meta, _grid(self.meta.shape, grid), needed
        )
        return None if stored is None or len(stored) >= needed else stored

    def _chunk_key(self, coords: Sequence[int]) -> str:
        return join(self.key, self.meta.chunk_key_encoding.encode(coords))

    def _fill(self, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        """Fill the part of the result of a chunk that is not stored with the fill value (kept
        as pieces: items equal to it, as UTF-8)."""
        if self.pieces is not None:
            start, stop = _bounds(piece.out_sel)
            self.pieces.append((start, *_repeated(self.fill, stop - start)))
            return
        work[_index(piece.out_sel)] = self.fill

    def _get(self, key: str) -> _Source | None:
        """The chunk at ``key``, refused unread if no valid encoding is that large."""
        limit = self.chunk_limit
        try:
            blob = self.handle.get(key, limit=limit)
        except TooLargeError as error:
            problem = f"it has {error.size} bytes, " + (
                f"expected exactly {limit}"
                if self.exact
                else f"more than any valid encoding of the chunk ({limit})"
            )
            raise _corrupt(error.where, problem) from None
        return None if blob is None else _Source(blob.data, self.handle.where(key))

    def _read_file_chunk(self, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        key = self._chunk_key(piece.coords)
        if self._read_straight(key, piece, work):
            return
        source = self._get(key)
        if source is None:
            self._fill(piece, work)
        else:
            self._decode(source, piece, work)

    def _read_straight(self, key: str, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> bool:
        """Read an uncompressed chunk that fills a block of the result whose rows are
        contiguous straight into it, with no chunk buffer; False if it cannot be."""
        if self.read_into is None or self.chain.compressors or self.stored is None:
            return False
        direct = self._direct_view(piece, work)
        buffers = None if direct is None else _straight_buffers(direct)
        if buffers is None:
            return False
        size = self.read_into(key, buffers)
        if size is None:
            self._fill(piece, work)
        elif size != self.nbytes:
            problem = f"it has {size} bytes, expected exactly {self.nbytes}"
            raise _corrupt(self.handle.where(key), problem)
        else:
            if direct.dtype.kind == "b":
                _check_bools(direct, self.handle.where(key))
            if not self.stored.isnative:
                direct.byteswap(inplace=True)
        return True

    def _read_shard(
        self,
        coords: tuple[int, ...],
        items: Iterator[tuple[int, ChunkPiece]],
        work: np.ndarray[Any, Any],
    ) -> None:
        assert self.shard is not None  # internal invariant
        key = self._chunk_key(coords)
        where = self.handle.where(key)
        size = self.shard.index_nbytes(self._shard_shape)
        start = -size if self.shard.index_location == "end" else 0
        source: Any = self.handle
        try:
            part = source.get_range(key, start, size)
        except RangesRefusedError:  # fetched whole, within the bound of a packed shard
            bound = packed_shard_bytes(self.shard, self._shard_shape, self.max_encoded)
            source = _whole_shard(self.handle, key, bound)
            part = None if source is None else source.get_range(key, start, size)
        if part is None:
            for _, piece in items:
                self._fill(piece, work)
            return
        index = read_shard_index(
            part.data, part.size, self.shard, self._shard_shape, self.max_encoded, where
        )
        for flat, piece in items:
            entry = index.entry(flat)
            if entry is None:
                self._fill(piece, work)
                continue
            inner = f"{where} (inner chunk {flat})"
            got = source.get_range(key, entry[0], entry[1])
            if got is None or len(got.data) != entry[1]:
                raise _corrupt(inner, "the file ended early (was it truncated?)")
            self._decode(_Source(got.data, inner), piece, work)

    def _decode(self, source: _Source, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        if self.stored is None:
            self._decode_strings(source, piece, work)
            return
        if not self.chain.compressors:
            self._copy(source, piece, work)
            return
        direct = self._direct_view(piece, work)
        sink = None if direct is None else _sink(direct)
        target = direct
        if sink is None:
            direct = None
            target = self._scratch()
            sink = _FlatSink(target)
        self._decode_bytes(source, sink)
        if target.dtype.kind == "b":
            _check_bools(target, source.where)
        if direct is None:
            work[_index(piece.out_sel)] = target[_index(piece.chunk_sel)]
        elif not self.stored.isnative:
            direct.byteswap(inplace=True)

    def _direct_view(self, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> Any:
        """The part of the result a whole chunk fills, if the chunk can be decoded into it."""
        if not piece.is_full(self.chunk_shape):
            return None
        if not all(isinstance(s, slice) for s in piece.out_sel):
            return None
        return work[(*piece.out_sel, Ellipsis)]

    def _scratch(self) -> np.ndarray[Any, Any]:
        """A chunk buffer of the calling thread, for this one chunk (it is reused later)."""
        assert self.stored is not None  # internal invariant: strings use no chunk buffer
        return _thread_buffer(self.nbytes).view(self.stored).reshape(self.chunk_shape)

    def _copy(self, source: _Source, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        """Copy an uncompressed chunk from the bytes read into place."""
        n = self.nbytes
        if source.size != n:
            raise _corrupt(source.where, f"it has {source.size} bytes, expected exactly {n}")
        chunk = np.frombuffer(source.data, dtype=self.stored).reshape(self.chunk_shape)
        if chunk.dtype.kind == "b":
            _check_bools(chunk, source.where)
        work[_index(piece.out_sel)] = chunk[_index(piece.chunk_sel)]

    def _decode_bytes(self, source: _Source, sink: Any) -> None:
        n = sink.size
        self._check_encoded_size(source)
        if self._decode_whole(source, sink):
            return
        for out in self.chain.decode_stream(source.pieces(), n, source.where):
            sink.write(out)
        if sink.pos != n:
            raise _corrupt(source.where, f"it decodes to {sink.pos} bytes, expected {n}")

    def _decode_whole(self, source: _Source, sink: Any) -> bool:
        """Whether a fast decoder (cytepool[fast]) took the chunk and decoded it in one step:
        zstd straight into a flat sink (else into the thread's buffer), gzip into a new one."""
        flat = isinstance(sink, _FlatSink)
        target = sink.bytes if flat else _thread_buffer(sink.size)
        whole: Any = None if flat else target
        if not self.chain.decode_into(source.data, target):
            whole = self.chain.decode_exact(source.data, sink.size)
            if whole is None:
                return False
        if whole is None:
            sink.pos = sink.size
        else:
            sink.write(whole)
        return True

    def _check_encoded_size(self, source: _Source) -> None:
        if source.size > self.max_encoded:
            problem = f"it has {source.size} bytes, more than any valid encoding of the chunk"
            raise _corrupt(source.where, f"{problem} ({self.max_encoded})")

    def _decode_strings(
        self, source: _Source, piece: ChunkPiece, work: np.ndarray[Any, Any]
    ) -> None:
        whole = self._whole(source)
        if whole is not None and self.spaced and _bounds(piece.chunk_sel) == (0, self.count):
            assert self.pieces is not None  # internal invariant
            kept = spaced(whole, self.count, source.where)  # parsed when first needed
            self.pieces.append((_bounds(piece.out_sel)[0], None, kept))
            return
        decoder = self._string_decoder(source, whole)
        del whole  # the decoder holds the decoded bytes, and lets them go as early as it can
        if self.pieces is not None:
            self._keep_buffers(decoder, piece)
            return
        direct = self._direct_view(piece, work)
        if direct is not None and direct.flags.c_contiguous:
            decoder.finish(out=direct.reshape(-1))  # straight into the result
            return
        chunk = decoder.finish(objects=self._as_objects(piece)).reshape(self.chunk_shape)
        del decoder  # the decoded bytes
        work[_index(piece.out_sel)] = chunk[_index(piece.chunk_sel)]

    def _as_objects(self, piece: ChunkPiece) -> bool:
        """Whether a string chunk is decoded into str objects to be copied into place.

        numpy 2.1 corrupts strings of over 15 bytes that a StringDType array gives through an
        integer index: on the chunk's side (one repeating a row: freeing them fails, assigning
        them crashes) and on the result's side (``numpy.ix_`` of two or more axes: the result
        gets empty strings or garbage). Such an assignment takes str objects instead, which it
        makes into new strings.
        """
        if self.objects:
            return True
        sides = (*piece.chunk_sel, *piece.out_sel)
        return any(isinstance(axis, np.ndarray) for axis in sides)

    def _keep_buffers(self, decoder: Decoder, piece: ChunkPiece) -> None:
        assert self.pieces is not None  # internal invariant
        a, b = _bounds(piece.chunk_sel)
        if self.spaced:
            self.pieces.append((_bounds(piece.out_sel)[0], None, decoder.spaced(a, b)))
            return
        lengths, body = decoder.buffers()
        if (a, b) != (0, len(lengths)):
            skipped = int(lengths[:a].sum())
            lengths = lengths[a:b]
            body = body[skipped : skipped + int(lengths.sum())]
        # a chunk holds less than 2 GiB (MAX_CHUNK_BYTES): its lengths fit in int32
        self.pieces.append((_bounds(piece.out_sel)[0], lengths.astype(np.int32), body))

    def _whole(self, source: _Source) -> Any:
        """A string chunk decoded in one piece: an uncompressed one taken over (not copied),
        or one a fast decoder decodes whole (:meth:`_decoded_whole`); None: to be streamed."""
        self._check_encoded_size(source)
        if not self.chain.compressors:
            return source.take()
        return self._decoded_whole(source)

    def _string_decoder(self, source: _Source, whole: Any) -> Decoder:
        """A decoder fed with the whole decoded chunk (:meth:`_whole`), or with the stream."""
        decoder = Decoder(self.count, source.where)
        if whole is None:
            for out in self.chain.decode_stream(source.pieces(), self.nbytes, source.where):
                decoder.feed(out)
        elif not self.chain.compressors:
            decoder.feed(whole)  # taken over, not copied
        else:  # checked in the stream's pieces, as the stream would be
            decoder.feed_whole(whole, PIECE_BYTES)
        return decoder

    def _decoded_whole(self, source: _Source) -> Any:
        """A string chunk of one piece decoded in one step by a fast decoder, if its gzip
        trailer or zstd frame header states a size of at most the larger of ``_STATED_BYTES``
        and ``_STATED_RATIO`` times its own; else None: streamed (a decompression bomb, say, is
        refused within a piece of its last valid byte). zstd decodes into the thread's chunk
        buffer: the decoder that takes the bytes over is done with them before this thread
        decodes another chunk; or, when the items are kept ``spaced``, into new bytes."""
        if source.size > PIECE_BYTES:  # more pieces: the stream's pieces would differ
            return None
        most = min(self.nbytes, max(_STATED_BYTES, _STATED_RATIO * source.size))
        buffer = bytearray if self.spaced else _thread_buffer  # spaced items are kept
        return self.chain.decode_stated(source.data, most, self.nbytes, buffer)


def _check_bools(target: np.ndarray[Any, Any], where: str) -> None:
    if np.max(target.view(np.uint8), initial=0) > 1:
        raise _corrupt(where, "a bool chunk holds a byte other than 0 and 1")


def _repeated(text: str, count: int) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """``count`` items equal to ``text`` as byte lengths (int32) and UTF-8 bytes.

    >>> _repeated("NA", 3)
    (array([2, 2, 2], dtype=int32), array([78, 65, 78, 65, 78, 65], dtype=uint8))
    """
    item = np.frombuffer(str(text).encode("utf-8"), dtype=np.uint8)
    return np.full(count, len(item), dtype=np.int32), np.tile(item, count)


def _whole_shard(handle: StoreHandle, key: str, bound: int) -> WholeShard | None:
    """The shard at ``key`` of a store that serves no byte ranges, fetched whole (None if
    absent); RemoteStoreError if it holds more than ``bound`` bytes (see
    :func:`~cytepool.io.zarr.sharding.packed_shard_bytes`)."""
    try:
        blob = handle.get(key, limit=bound)
    except TooLargeError as error:
        msg = (
            f"{error.where} cannot be read: its server does not serve byte ranges, which "
            f"sharded arrays need, and the shard has {error.size} bytes, more than the {bound} "
            "its index and inner chunks take packed, the most a read fetches whole instead; "
            "serve the store from a server that answers Range requests (object stores, nginx)"
        )
        raise RemoteStoreError(msg) from None
    return None if blob is None else WholeShard(blob.data)


def _most_chunks(selection: Selection, shape: Sequence[int], grid: Sequence[int]) -> int:
    """At most how many chunks of length ``grid`` a selection of an array of ``shape`` touches:
    along each axis, no more than it selects positions, nor than the axis has chunks."""
    counts = _grid(shape, grid)
    return math.prod(min(n, c) for n, c in zip(selection.full_shape, counts, strict=True))


def _grid(shape: Sequence[int], chunks: Sequence[int]) -> tuple[int, ...]:
    """The number of chunks along each axis."""
    return tuple(-(-n // c) for n, c in zip(shape, chunks, strict=True))


def _index(selection: Sequence[Any]) -> Any:
    index = as_index(selection)
    return index if index else (Ellipsis,)


def _bounds(selection: Any) -> tuple[int, int]:
    (axis,) = selection
    if not isinstance(axis, slice) or axis.step not in (None, 1):
        msg = f"a string array is read as buffers in slices of rows, found {axis!r}"
        raise InputTypeError(msg)
    return axis.start, axis.stop
