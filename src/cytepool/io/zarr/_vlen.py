"""The vlen-utf8 byte layout, encoded and decoded with numpy instead of a loop per string.

A chunk is a u32 item count, then for each item (C order) a u32 byte length and that many bytes
of UTF-8, all integers little endian. Decoding checks the count, every length, truncation,
trailing bytes and UTF-8 (each item on its own), and raises FormatError naming the chunk.
"""

from __future__ import annotations

import itertools
import struct
from typing import Any

import numpy as np

from cytepool.errors import FormatError

__all__ = ["decode", "encode"]

_STRING = np.dtypes.StringDType()
_U32 = struct.Struct("<I")
_OFFSETS = np.arange(4)


def _corrupt(where: str, problem: str) -> FormatError:
    return FormatError(f"corrupt chunk {where}: {problem}")


# ---------------------------------------------------------------------------------------------
# Encoding


def encode(values: np.ndarray[Any, Any]) -> bytes:
    """The vlen-utf8 encoding of a 1-D array of str (UnicodeEncodeError for lone surrogates)."""
    strings = values.tolist()
    text = "".join(strings)
    body = text.encode("utf-8")
    if values.dtype.kind in "TU":
        chars = np.strings.str_len(values).astype(np.int64)
    else:
        chars = np.fromiter(map(len, strings), dtype=np.int64, count=len(strings))
    lengths = chars if len(body) == len(text) else _utf8_lengths(text, chars)
    return _assemble(body, lengths)


def _utf8_lengths(text: str, chars: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """Bytes per item, from the code points of the joined text and the characters per item."""
    codes = np.frombuffer(text.encode("utf-32-le"), dtype="<u4")
    per_char = 1 + (codes >= 0x80) + (codes >= 0x800) + (codes >= 0x10000)
    total = np.concatenate([[0], np.cumsum(per_char)])
    ends = np.cumsum(chars)
    return np.asarray(total[ends] - total[ends - chars], dtype=np.int64)


def _assemble(body: bytes, lengths: np.ndarray[Any, Any]) -> bytes:
    n = len(lengths)
    out = np.empty(4 + 4 * n + len(body), dtype=np.uint8)
    out[:4] = np.frombuffer(_U32.pack(n), dtype=np.uint8)
    fields = _field_bytes(4 + 4 * np.arange(n) + np.cumsum(lengths) - lengths)
    out[fields] = lengths.astype("<u4").view(np.uint8)
    keep = np.ones(len(out), dtype=bool)
    keep[:4] = False
    keep[fields] = False
    out[keep] = np.frombuffer(body, dtype=np.uint8)
    return out.tobytes()


def _field_bytes(fields: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """The positions of the 4 bytes of each length field."""
    return (fields[:, None] + _OFFSETS).reshape(-1)


# ---------------------------------------------------------------------------------------------
# Decoding


def decode(
    data: bytes | bytearray, count: int, where: str, *, objects: bool = False
) -> np.ndarray[Any, Any]:
    """Decode a chunk of ``count`` strings into a 1-D StringDType (or object) array."""
    if len(data) < 4:
        raise _corrupt(where, f"the vlen-utf8 data is truncated: {len(data)} bytes")
    found = _U32.unpack_from(data, 0)[0]
    if found != count:
        raise _corrupt(where, f"the vlen-utf8 data holds {found} items, expected {count}")
    buffer = np.frombuffer(data, dtype=np.uint8)
    lengths = _equal_lengths(buffer, count)
    if lengths is None:
        lengths = _scan_lengths(data, count, where)
    return _split(buffer, lengths, where, objects)


def _equal_lengths(buffer: np.ndarray[Any, Any], count: int) -> np.ndarray[Any, Any] | None:
    """The lengths if every item has the byte length of the first (no loop needed), else None."""
    if len(buffer) < 8:
        return None
    first = int(buffer[4:8].view("<u4")[0])
    if len(buffer) != 4 + count * (4 + first):
        return None
    rows = buffer[4:].reshape(count, 4 + first)
    found = np.ascontiguousarray(rows[:, :4]).view("<u4").reshape(-1)
    if not (found == first).all():
        return None
    return np.full(count, first, dtype=np.int64)


def _scan_lengths(data: bytes | bytearray, count: int, where: str) -> np.ndarray[Any, Any]:
    unpack = _U32.unpack_from
    lengths: list[int] = []
    append = lengths.append
    pos = 4
    try:
        for _ in range(count):
            length = unpack(data, pos)[0]
            append(length)
            pos += 4 + length
    except struct.error:
        pass
    if len(lengths) != count or pos != len(data):
        _explain_lengths(data, count, where)
    return np.array(lengths, dtype=np.int64)


def _explain_lengths(data: bytes | bytearray, count: int, where: str) -> None:
    """Raise the error that describes what is wrong with the item lengths."""
    pos, end = 4, len(data)
    for i in range(count):
        if end - pos < 4:
            raise _corrupt(where, f"the vlen-utf8 data is truncated in the length of item {i}")
        length = _U32.unpack_from(data, pos)[0]
        pos += 4
        if length > end - pos:
            problem = f"vlen-utf8 item {i} claims {length} bytes, only {end - pos} remain"
            raise _corrupt(where, problem)
        pos += length
    raise _corrupt(where, f"{end - pos} trailing bytes after the last vlen-utf8 item")


def _split(
    buffer: np.ndarray[Any, Any], lengths: np.ndarray[Any, Any], where: str, objects: bool
) -> Any:
    """The items: the bodies joined by one separator byte, decoded once and split in C.

    The separator is an ASCII byte that no item holds, so decoding also checks that each
    item is valid UTF-8 on its own (a character cut by an item boundary gets a separator in
    the middle).
    """
    n = len(lengths)
    fields = 4 + 4 * np.arange(n) + np.cumsum(lengths) - lengths
    keep = np.ones(len(buffer), dtype=bool)
    keep[:4] = False
    keep[_field_bytes(fields)] = False
    keep[fields[1:]] = True  # the first byte of each later length field becomes a separator
    joined = buffer[keep]
    separators = fields[1:] - 4 * np.arange(1, n) + np.arange(n - 1) - 4
    joined[separators] = 0
    raw = joined.tobytes()
    if raw.count(b"\0") == n - 1:  # no item holds a NUL: the usual case
        items = _utf8(raw, where).split("\0")
    else:
        items = _split_on_unused(joined, separators, where)
    result = np.empty(n, dtype=object if objects else _STRING)
    result[:] = items
    return result


def _split_on_unused(
    joined: np.ndarray[Any, Any], separators: np.ndarray[Any, Any], where: str
) -> list[str]:
    counts = np.bincount(joined, minlength=256)[:128]
    counts -= np.bincount(joined[separators], minlength=256)[:128]
    unused = np.flatnonzero(counts == 0)
    if not len(unused):  # the items use every ASCII byte: decode them one by one
        raw = joined.tobytes()
        bounds = [-1, *separators.tolist(), len(raw)]
        return [_utf8(raw[a + 1 : b], where) for a, b in itertools.pairwise(bounds)]
    separator = int(unused[0])
    joined[separators] = separator
    return _utf8(joined.tobytes(), where).split(chr(separator))


def _utf8(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise _corrupt(where, f"a vlen-utf8 item is not valid UTF-8: {error}") from error
