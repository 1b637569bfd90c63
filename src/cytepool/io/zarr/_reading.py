"""Reading chunks into a preallocated result: bounded sources, sinks and the chunk reader.

A read allocates its result once, then decodes the chunks it needs, each once and a few at a
time on the shared pool of ``_threads``: straight into the result when a whole chunk fills a
C-contiguous block of it or a block whose rows are contiguous, otherwise into a reusable chunk
buffer of the decoding thread that is then copied into place. Chunks cover disjoint parts of the
result, so the threads never write to the same element.
"""

from __future__ import annotations

import io
import os
import stat
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from cytepool.errors import FormatError
from cytepool.io.zarr._threads import for_each
from cytepool.io.zarr._vlen import Decoder
from cytepool.io.zarr.codecs import (
    MAX_CHUNK_BYTES,
    PIECE_BYTES,
    BytesCodec,
    ShardingCodec,
)
from cytepool.io.zarr.indexing import ChunkPiece, Selection, as_index
from cytepool.io.zarr.metadata import ArrayMetadata
from cytepool.io.zarr.sharding import read_shard_index

__all__ = ["Reader", "open_chunk"]

_O_BINARY = getattr(os, "O_BINARY", 0)  # Windows


class _Source:
    """A byte range of an open file, read in bounded pieces or into a buffer."""

    def __init__(self, file: io.FileIO, offset: int, size: int, where: str):
        self.file, self.offset, self.size, self.where = file, offset, size, where

    def pieces(self) -> Iterator[bytes]:
        pos, end = self.offset, self.offset + self.size
        self.file.seek(pos)
        while pos < end:
            data = self.file.read(min(PIECE_BYTES, end - pos))
            if not data:
                raise _corrupt(self.where, "the file ended early (was it truncated?)")
            pos += len(data)
            yield data

    def readinto(self, dest: memoryview) -> None:
        pos, n = 0, len(dest)
        self.file.seek(self.offset)
        while pos < n:
            got = self.file.readinto(dest[pos:])
            if not got:
                raise _corrupt(self.where, "the file ended early (was it truncated?)")
            pos += got


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


def _reader_of(file: io.FileIO) -> Any:
    """``read(offset, size)`` on an open file."""

    def read(offset: int, size: int) -> bytes:
        file.seek(offset)
        parts = []
        while size > 0 and (data := file.read(size)):
            parts.append(data)
            size -= len(data)
        return b"".join(parts)

    return read


def open_chunk(path: str) -> io.FileIO | None:
    """Open a chunk or shard file; None if it is not stored."""
    try:
        fd = os.open(path, os.O_RDONLY | _O_BINARY)
    except FileNotFoundError:
        return None
    except (NotADirectoryError, IsADirectoryError) as error:
        raise _corrupt(path, "the chunk key does not name a regular file") from error
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise _corrupt(path, "the chunk key does not name a regular file")
    return io.FileIO(fd, "rb")


class _FlatSink:
    """Decoded bytes go into a C-contiguous array, in order."""

    def __init__(self, array: np.ndarray[Any, Any]):
        self.bytes = array.reshape(-1).view(np.uint8)  # numpy copies release the GIL
        self.size, self.pos = len(self.bytes), 0

    def write(self, piece: bytes) -> None:
        end = self.pos + len(piece)
        self.bytes[self.pos : end] = np.frombuffer(piece, dtype=np.uint8)
        self.pos = end

    def read(self, source: _Source) -> None:
        source.readinto(self.bytes.data)
        self.pos = self.size


class _RowSink:
    """Decoded bytes go into the rows (contiguous last axis) of a strided view, in C order."""

    def __init__(self, rows: np.ndarray[Any, Any]):
        self.rows = rows  # uint8, shape (n_rows, bytes per row)
        self.width = rows.shape[1]
        self.size, self.pos = rows.size, 0

    def write(self, piece: bytes) -> None:
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

    def read(self, source: _Source) -> None:
        for piece in source.pieces():
            self.write(piece)


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
    """Decodes the chunks of one read into the preallocated result."""

    def __init__(self, path: Path, meta: ArrayMetadata, *, objects: bool = False):
        self.path, self.meta, self.objects = path, meta, objects
        self.root = str(path)
        self.fill = str(meta.fill_value) if objects else meta.fill_value
        head = meta.codecs.array_bytes
        self.shard = head if isinstance(head, ShardingCodec) else None
        self.chain = head.codecs if isinstance(head, ShardingCodec) else meta.codecs
        self.chunk_shape = self.shard.chunk_shape if self.shard else meta.chunk_grid.chunk_shape
        self.data_type = meta.data_type
        self.count = int(np.prod(self.chunk_shape, dtype=np.int64))
        string = self.data_type.is_string
        self.nbytes = MAX_CHUNK_BYTES if string else self.count * self.data_type.itemsize
        self.max_encoded = self.chain.limits(self.nbytes)[-1]
        array_bytes = self.chain.array_bytes
        self.stored = (
            array_bytes.stored_dtype(self.data_type.dtype)
            if isinstance(array_bytes, BytesCodec)
            else None
        )
        self.local = threading.local()  # each decoding thread's chunk buffer

    @property
    def _shard_shape(self) -> tuple[int, ...]:
        return self.meta.chunk_grid.chunk_shape

    def read(self, selection: Selection, work: np.ndarray[Any, Any]) -> None:
        pieces = selection.pieces(self.chunk_shape)
        if self.shard is None:
            for_each(lambda piece: self._read_file_chunk(piece, work), pieces)
        else:
            self._read_shards(pieces, work)

    def _key_path(self, coords: Sequence[int]) -> str:
        return os.path.join(self.root, self.meta.chunk_key_encoding.encode(coords))

    def _fill(self, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        work[_index(piece.out_sel)] = self.fill

    def _read_file_chunk(self, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        path = self._key_path(piece.coords)
        file = open_chunk(path)
        if file is None:
            self._fill(piece, work)
            return
        with file:
            size = os.fstat(file.fileno()).st_size
            self._decode(_Source(file, 0, size, path), piece, work)

    def _read_shards(self, pieces: Iterator[ChunkPiece], work: np.ndarray[Any, Any]) -> None:
        assert self.shard is not None  # internal invariant
        per_shard = [s // c for s, c in zip(self._shard_shape, self.chunk_shape, strict=True)]
        groups: dict[tuple[int, ...], list[tuple[int, ChunkPiece]]] = {}
        for piece in pieces:
            shard = tuple(c // k for c, k in zip(piece.coords, per_shard, strict=True))
            local = [c % k for c, k in zip(piece.coords, per_shard, strict=True)]
            flat = int(np.ravel_multi_index(local, per_shard)) if local else 0
            groups.setdefault(shard, []).append((flat, piece))
        for_each(lambda group: self._read_shard(group[0], group[1], work), groups.items())

    def _read_shard(
        self, coords: tuple[int, ...], items: list[tuple[int, ChunkPiece]], work: np.ndarray
    ) -> None:
        assert self.shard is not None  # internal invariant
        path = self._key_path(coords)
        file = open_chunk(path)
        if file is None:
            for _, piece in items:
                self._fill(piece, work)
            return
        with file:
            size = os.fstat(file.fileno()).st_size
            index = read_shard_index(
                _reader_of(file), size, self.shard, self._shard_shape, self.max_encoded, path
            )
            for flat, piece in items:
                entry = index.entry(flat)
                if entry is None:
                    self._fill(piece, work)
                    continue
                where = f"{path} (inner chunk {flat})"
                self._decode(_Source(file, entry[0], entry[1], where), piece, work)

    def _decode(self, source: _Source, piece: ChunkPiece, work: np.ndarray[Any, Any]) -> None:
        if self.stored is None:
            self._decode_strings(source, piece, work)
            return
        direct = self._direct_view(piece, work)
        sink = None if direct is None else _sink(direct)
        if sink is None:
            direct = None
            sink = _FlatSink(self._scratch())
        target = self._scratch() if direct is None else direct
        self._decode_bytes(source, sink)
        if target.dtype.kind == "b":
            self._check_bools(target, source.where)
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
        scratch = getattr(self.local, "scratch", None)
        if scratch is None:
            scratch = self.local.scratch = np.empty(self.chunk_shape, dtype=self.stored)
        return scratch

    def _decode_bytes(self, source: _Source, sink: Any) -> None:
        n = sink.size
        if not self.chain.compressors:
            if source.size != n:
                problem = f"it has {source.size} bytes, expected exactly {n}"
                raise _corrupt(source.where, problem)
            sink.read(source)
            return
        self._check_encoded_size(source)
        for out in self.chain.decode_stream(source.pieces(), n, source.where):
            sink.write(out)
        if sink.pos != n:
            raise _corrupt(source.where, f"it decodes to {sink.pos} bytes, expected {n}")

    def _check_encoded_size(self, source: _Source) -> None:
        if source.size > self.max_encoded:
            problem = f"it has {source.size} bytes, more than any valid encoding of the chunk"
            raise _corrupt(source.where, f"{problem} ({self.max_encoded})")

    @staticmethod
    def _check_bools(target: np.ndarray[Any, Any], where: str) -> None:
        if np.max(target.view(np.uint8), initial=0) > 1:
            raise _corrupt(where, "a bool chunk holds a byte other than 0 and 1")

    def _decode_strings(
        self, source: _Source, piece: ChunkPiece, work: np.ndarray[Any, Any]
    ) -> None:
        self._check_encoded_size(source)
        decoder = Decoder(self.count, source.where)
        pieces = source.pieces()
        if self.chain.compressors:
            pieces = self.chain.decode_stream(pieces, self.nbytes, source.where)
        for out in pieces:
            decoder.feed(out)
        chunk = decoder.finish(objects=self.objects).reshape(self.chunk_shape)
        work[_index(piece.out_sel)] = chunk[_index(piece.chunk_sel)]


def _index(selection: Sequence[Any]) -> Any:
    index = as_index(selection)
    return index if index else (Ellipsis,)
