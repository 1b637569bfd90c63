"""Reading ``sharding_indexed`` shards: the index, its CRC-32C, and its checks.

A shard file holds encoded inner chunks and an index of one (offset, nbytes) pair of u64 per
inner chunk (C order), at the end or the start of the file, followed by the CRC-32C of the
index bytes when the index codecs end with ``crc32c``. An inner chunk equal to the fill value
is marked (2**64-1, 2**64-1). Only the index and the inner chunks a read needs are read.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from cytepool.errors import FormatError
from cytepool.io.zarr.codecs import ShardingCodec
from cytepool.io.zarr.store import Part

__all__ = ["ShardIndex", "WholeShard", "crc32c", "packed_shard_bytes", "read_shard_index"]

_EMPTY = np.uint64(2**64 - 1)
_POLY = 0x82F63B78


def _tables() -> tuple[tuple[int, ...], ...]:
    first = []
    for n in range(256):
        crc = n
        for _ in range(8):
            crc = (crc >> 1) ^ _POLY if crc & 1 else crc >> 1
        first.append(crc)
    tables = [first]
    for _ in range(7):
        prev = tables[-1]
        tables.append([(prev[n] >> 8) ^ first[prev[n] & 0xFF] for n in range(256)])
    return tuple(tuple(t) for t in tables)


_T = _tables()


def crc32c(data: bytes | bytearray | memoryview, crc: int = 0) -> int:
    """The CRC-32C (Castagnoli) of ``data``, as google_crc32c and the crc32c codec compute it.

    Parameters
    ----------
    data
        The bytes.
    crc
        The CRC of preceding bytes, to continue a running checksum.

    Returns
    -------
    The checksum, an unsigned 32-bit integer.

    Examples
    --------
    >>> hex(crc32c(b"123456789"))
    '0xe3069283'
    """
    t0, t1, t2, t3, t4, t5, t6, t7 = _T
    crc ^= 0xFFFFFFFF
    data = bytes(data)
    n8 = len(data) - len(data) % 8
    for lo, hi in struct.iter_unpack("<II", data[:n8]):
        lo ^= crc
        crc = (
            t7[lo & 0xFF]
            ^ t6[(lo >> 8) & 0xFF]
            ^ t5[(lo >> 16) & 0xFF]
            ^ t4[lo >> 24]
            ^ t3[hi & 0xFF]
            ^ t2[(hi >> 8) & 0xFF]
            ^ t1[(hi >> 16) & 0xFF]
            ^ t0[hi >> 24]
        )
    for byte in data[n8:]:
        crc = t0[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


@dataclass(frozen=True, eq=False)
class ShardIndex:
    """A checked shard index: per inner chunk (C order) its offset and size, or empty."""

    offsets: np.ndarray[Any, np.dtype[np.uint64]]
    nbytes: np.ndarray[Any, np.dtype[np.uint64]]
    empty: np.ndarray[Any, np.dtype[np.bool_]]

    def entry(self, inner: int) -> tuple[int, int] | None:
        """The (offset, nbytes) of inner chunk ``inner``, or None if it is empty."""
        if self.empty[inner]:
            return None
        return int(self.offsets[inner]), int(self.nbytes[inner])


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt shard {where}: {problem}")


def packed_shard_bytes(
    codec: ShardingCodec, shard_shape: Sequence[int], max_chunk_nbytes: int
) -> int:
    """The most bytes a shard takes whose inner chunks are packed, as writers store them: its
    index and, for every inner chunk, the most bytes a valid encoding of it takes
    (``max_chunk_nbytes``). A shard with gaps between its inner chunks may be larger.

    Examples
    --------
    >>> from cytepool.io.zarr.codecs import BytesCodec, CodecChain, ShardIndexCodecs
    >>> codec = ShardingCodec((2,), CodecChain(BytesCodec()), ShardIndexCodecs("little", True))
    >>> packed_shard_bytes(codec, (8,), 16)  # 4 inner chunks of at most 16 bytes, the index
    132
    """
    inner = math.prod(s // c for s, c in zip(shard_shape, codec.chunk_shape, strict=True))
    return codec.index_nbytes(shard_shape) + inner * max_chunk_nbytes


class WholeShard:
    """A shard fetched whole (from a store that serves no byte ranges), giving its byte ranges
    as :meth:`cytepool.io.zarr.store.StoreHandle.get_range` does.

    Examples
    --------
    >>> WholeShard(b"abcdef").get_range("c/0", -4, 4)
    Part(data=b'cdef', size=6)
    >>> WholeShard(b"ab").get_range("c/0", -4, 4)  # fewer bytes where the shard ends first
    Part(data=b'ab', size=2)
    """

    def __init__(self, data: bytes):
        self.data = data

    def get_range(self, key: str, start: int, length: int) -> Part:
        """``length`` bytes from ``start`` (the last ``-start`` if negative)."""
        size = len(self.data)
        first = max(0, size + start) if start < 0 else min(start, size)
        return Part(self.data[first : first + length], size)


def read_shard_index(
    raw: bytes,
    file_size: int,
    codec: ShardingCodec,
    shard_shape: Sequence[int],
    max_chunk_nbytes: int,
    where: str,
) -> ShardIndex:
    """Verify and check the index of a shard file.

    Parameters
    ----------
    raw
        The bytes where the index is: the last (index at the end) or first (at the start)
        ``codec.index_nbytes(shard_shape)`` bytes of the file, fewer if the file is shorter.
    file_size
        Its size in bytes.
    codec
        The array's sharding codec.
    shard_shape
        The shard shape (the outer chunk shape).
    max_chunk_nbytes
        The most bytes a valid encoded inner chunk takes.
    where
        The shard's path, for error messages.

    Returns
    -------
    The index.

    Raises
    ------
    FormatError
        If the index does not fit the file, fails its CRC-32C, or has entries that are out of
        range, too large or overlapping.
    """
    size = codec.index_nbytes(shard_shape)
    if file_size < size:
        problem = f"the file has {file_size} bytes, fewer than its index of {size} bytes"
        raise _corrupt(where, problem)
    if len(raw) != size:
        raise _corrupt(where, f"the index is truncated ({len(raw)} of {size} bytes)")
    if codec.index_codecs.crc32c:
        _check_crc(raw, where)
    byte_order = "<" if codec.index_codecs.endian == "little" else ">"
    flat = np.frombuffer(raw, dtype=f"{byte_order}u8", count=(size // 16) * 2)
    pairs = flat.astype(np.uint64).reshape(-1, 2)
    low, high = (0, file_size - size) if codec.index_location == "end" else (size, file_size)
    return _check_entries(pairs[:, 0], pairs[:, 1], (low, high), max_chunk_nbytes, where)


def _check_crc(raw: bytes, where: str) -> None:
    stored = int.from_bytes(raw[-4:], "little")
    computed = crc32c(raw[:-4])
    if stored != computed:
        problem = f"the index checksum (CRC-32C) is {stored:#010x}, expected {computed:#010x}"
        raise _corrupt(where, problem)


def _check_entries(
    offsets: np.ndarray[Any, Any],
    nbytes: np.ndarray[Any, Any],
    region: tuple[int, int],
    max_chunk_nbytes: int,
    where: str,
) -> ShardIndex:
    empty_offset, empty_size = offsets == _EMPTY, nbytes == _EMPTY
    half = np.flatnonzero(empty_offset != empty_size)
    if half.size:
        problem = f"index entry {int(half[0])} is half empty (offset or nbytes 2**64-1)"
        raise _corrupt(where, problem)
    used = np.flatnonzero(~empty_offset)
    low, high = np.uint64(region[0]), np.uint64(region[1])
    off, size = offsets[used], nbytes[used]
    bad = (off < low) | (off > high) | (size > high - np.minimum(off, high))
    if bad.any():
        i = int(used[np.argmax(bad)])
        problem = f"inner chunk {i} at offset {int(offsets[i])} with {int(nbytes[i])} bytes"
        raise _corrupt(where, f"{problem} lies outside the data bytes {region[0]}..{region[1]}")
    _check_sizes_and_overlaps(used, off, size, max_chunk_nbytes, where)
    return ShardIndex(offsets, nbytes, empty_offset)


def _check_sizes_and_overlaps(
    used: np.ndarray[Any, Any],
    off: np.ndarray[Any, Any],
    size: np.ndarray[Any, Any],
    max_chunk_nbytes: int,
    where: str,
) -> None:
    big = size > np.uint64(max_chunk_nbytes)
    if big.any():
        i = int(np.argmax(big))
        problem = f"inner chunk {int(used[i])} has {int(size[i])} bytes"
        raise _corrupt(where, f"{problem}, more than any valid encoding ({max_chunk_nbytes})")
    order = np.lexsort((size, off))
    ends = off[order] + size[order]
    overlap = np.flatnonzero(off[order][1:] < ends[:-1])
    if overlap.size:
        a, b = used[order[overlap[0]]], used[order[overlap[0] + 1]]
        raise _corrupt(where, f"the bytes of inner chunks {int(a)} and {int(b)} overlap")
